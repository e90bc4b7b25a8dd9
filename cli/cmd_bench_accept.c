/* mtpq bench-acceptance: replay recorded greedy target traces through the
 * stock and quantized drafters; per-position acceptance side by side. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "kernels/accept_ci.h"
#include "kernels/replay.h"
#include "kernels/runtime.h"
#include "kernels/record.h"
#include "kernels/target.h"
#include "kernels/traces.h"
#include "quant/card.h"

const struct cli_opt bench_accept_opts[] = {
    {"target", 0, OPT_STR, 0, "DIR", "target repo (its mtp.* is the stock drafter; required)"},
    {"drafter", 0, OPT_STR, OPT_MULTI, "DIR", "an mtpq drafter repo to compare with stock (repeatable)"},
    {"traces", 0, OPT_STR, 0, "FILE", "traces safetensors (or --prompts)"},
    {"prompts", 0, OPT_STR, OPT_MULTI, "FILE",
     "without --traces: record the traces first with the target "
     "(as mtpq traces does; repeatable)"},
    {"new-tokens", 'n', OPT_UINT, 0, "N", "with --prompts: tokens generated after each prompt (default 96)"},
    {"k", 'k', OPT_UINT, 0, "N", "draft tokens per round (default: the traces' k, else 3)"},
    {"prompt-len", 0, OPT_UINT, 0, "N",
     "prompt tokens of every trace (default: each trace's metadata "
     "prompt_len.NAME, else the file's prompt_len, else 192)"},
    {"draft-window", 0, OPT_UINT, 0, "N", "sliding window of the draft attention (0 = full)"},
    {"plot", 0, OPT_STR, 0, "FILE.svg", "write an SVG plot of per-position acceptance"},
    {"json", 0, OPT_FLAG, 0, NULL, "print the JSON report"},
    {"backend", 0, OPT_STR, 0, "auto|cpu|cuda", "runtime backend (default auto: cuda when a GPU is present)"},
    {NULL, 0, 0, 0, NULL, NULL},
};

#define MAX_DRAFTERS 9

struct result {
  const char *path; /* NULL: stock */
  struct mtpq_accept_report r;
  int32_t *fd, *truth; /* first drafts, teacher-forced (mtpq_first_drafts), and the target's tokens */
  size_t nfd;
};

/* A drafter's first drafts paired with stock's at the same positions: its
 * accuracy, how often it drafts what stock drafts, and the difference of
 * the accuracies with a 95% interval for paired proportions (only the
 * positions where exactly one of the two is right carry information). */
struct paired {
  double acc, agree, diff, ci;
};
static struct paired pair_first(const struct result *stock, const struct result *q) {
  struct paired p = {0, 0, 0, 0};
  const size_t n = q->nfd < stock->nfd ? q->nfd : stock->nfd;
  if (!n) return p;
  size_t right = 0, same = 0, b = 0, c = 0; /* b: stock right, q wrong; c: q right, stock wrong */
  for (size_t i = 0; i < n; i++) {
    const int rs = stock->fd[i] == stock->truth[i], rq = q->fd[i] == q->truth[i];
    right += rq, same += q->fd[i] == stock->fd[i], b += rs && !rq, c += rq && !rs;
  }
  const double N = (double)n, d = ((double)c - (double)b) / N;
  p.acc = (double)right / N, p.agree = (double)same / N, p.diff = d;
  p.ci = 1.96 * sqrt(fmax(0.0, ((double)b + (double)c) / N - d * d) / N);
  return p;
}

/* the intervals of a drafter's metrics and, paired, of its difference to stock */
static void ci_json(cJSON *o, const struct mtpq_accept_ci *c) {
  cJSON_AddItemToObject(o, "mal_ci95", cli_json_pair(c->mal_ci));
  cJSON *p = cJSON_AddArrayToObject(o, "per_position_ci95");
  for (int i = 0; i < c->k; i++) cJSON_AddItemToArray(p, cli_json_pair(c->perpos_ci[i]));
  if (!c->paired) return;
  cJSON *v = cJSON_AddObjectToObject(o, "vs_stock");
  cJSON_AddNumberToObject(v, "mal_diff", c->dmal);
  cJSON_AddItemToObject(v, "mal_diff_ci95", cli_json_pair(c->dmal_ci));
  cJSON *d = cJSON_AddArrayToObject(v, "per_position_diff"), *dc = cJSON_AddArrayToObject(v, "per_position_diff_ci95");
  for (int i = 0; i < c->k; i++) {
    cJSON_AddItemToArray(d, cJSON_CreateNumber(c->dperpos[i]));
    cJSON_AddItemToArray(dc, cli_json_pair(c->dperpos_ci[i]));
  }
}

/* a row of intervals under a drafter's row (diff: of its difference to stock) */
static void print_ci_row(const struct mtpq_accept_ci *c, int diff) {
  printf("%-16s %-34s %7s", "", diff ? "    95% (paired)" : "  95% interval", "");
  if (diff) {
    printf(" [%+.3f, %+.3f]", c->dmal_ci[0], c->dmal_ci[1]);
    for (int i = 0; i < c->k; i++) printf(" pos%d [%+.3f, %+.3f]", i + 1, c->dperpos_ci[i][0], c->dperpos_ci[i][1]);
  } else {
    printf(" [%.3f, %.3f]", c->mal_ci[0], c->mal_ci[1]);
    for (int i = 0; i < c->k; i++) printf(" pos%d [%.3f, %.3f]", i + 1, c->perpos_ci[i][0], c->perpos_ci[i][1]);
  }
  printf("\n");
}

static cJSON *stats_json(const struct mtpq_accept_stats *s, const struct mtpq_accept_ci *ci) {
  cJSON *o = cJSON_CreateObject();
  cJSON *c = cJSON_AddArrayToObject(o, "conditional"), *p = cJSON_AddArrayToObject(o, "per_position");
  for (int i = 0; i < s->k; i++) {
    cJSON_AddItemToArray(c, cJSON_CreateNumber(mtpq_accept_cond(s, i)));
    cJSON_AddItemToArray(p, cJSON_CreateNumber(mtpq_accept_perpos(s, i)));
  }
  cJSON_AddNumberToObject(o, "mean_acceptance_length", mtpq_accept_mal(s));
  cJSON_AddNumberToObject(o, "drafts", (double)s->drafts);
  cJSON_AddNumberToObject(o, "draft_tokens", (double)s->draft_tokens);
  cJSON_AddNumberToObject(o, "draft_step_us", mtpq_accept_step_us(s));
  cJSON_AddNumberToObject(o, "catchup_us", mtpq_accept_catchup_us(s));
  cJSON_AddNumberToObject(o, "round_us", mtpq_accept_round_us(s));
  cJSON_AddNumberToObject(o, "draft_tokens_per_s", mtpq_accept_tokens_per_s(s));
  cJSON_AddNumberToObject(o, "traces", (double)ci->units);
  ci_json(o, ci);
  return o;
}

/* --prompts: the traces recorded by the target on backend be
 * (kernels/record.h), text prompts tokenized with the target's tokenizer */
static int record_traces(const char *target, enum mtpq_backend be, const char *const *files, int nf, int64_t n_new,
                         int k, const char *out) {
  struct mtpq_err err = {0};
  struct mtpq_target *t = NULL;
  struct mtpq_prompts p = {0};
  enum mtpq_status st = mtpq_target_open(target, &t, &err);
  if (!st) st = mtpq_prompts_read_files(files, nf, target, NULL, "text", 0, 0, &p, &err);
  if (!st) st = mtpq_traces_record(t, be, &p, n_new, k, out, NULL, NULL, &err);
  mtpq_prompts_free(&p);
  mtpq_target_close(t);
  return st ? cli_fail(st, &err) : 0;
}

int cmd_bench_accept(int argc, char **argv) {
  struct cli_args a;
  int help;
  const char *cmd = "bench-acceptance";
  if (cli_parse(cmd, bench_accept_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  const char *target = cli_str(bench_accept_opts, &a, "target"), *traces = cli_str(bench_accept_opts, &a, "traces");
  const int ipr = cli_opt_index(bench_accept_opts, "prompts");
  if (!target || (!traces) == (!a.set[ipr]) || a.npos)
    return cli_usage_error(cmd, "--target and one of --traces or --prompts are required");
  enum mtpq_backend be;
  int brc = cli_backend(cmd, cli_str(bench_accept_opts, &a, "backend"), &be);
  if (brc) return brc;
  const char *plot0 = cli_str(bench_accept_opts, &a, "plot");
  if (plot0 && !cli_out_dir_ok(plot0)) { /* before the replay, whose table would be lost */
    cli_error("%s: cannot write there (its directory is missing or not writable)", plot0);
    return MTPQ_EXIT_IO;
  }
  char made[64] = "";
  if (!traces) { /* record them first, into a temporary file removed at the end */
    const char *tmp = getenv("TMPDIR");
    snprintf(made, sizeof made, "%s/mtpq-traces-XXXXXX", tmp && strlen(tmp) < 30 ? tmp : "/tmp");
    int fd = mkstemp(made);
    if (fd < 0) {
      cli_error("cannot create a temporary traces file %s", made);
      return MTPQ_EXIT_IO;
    }
    close(fd);
    int rrc =
        record_traces(target, be, a.multi[ipr], a.set[ipr], (int64_t)cli_uint(bench_accept_opts, &a, "new-tokens", 96),
                      (int)cli_uint(bench_accept_opts, &a, "k", 3), made);
    if (rrc) {
      unlink(made);
      return rrc;
    }
    traces = made;
  }
  int idr = cli_opt_index(bench_accept_opts, "drafter");
  if (a.set[idr] + 1 > MAX_DRAFTERS) return cli_usage_error(cmd, "at most %d drafters", MAX_DRAFTERS - 1);
  struct mtpq_err err = {0};
  struct mtpq_traces *tf = NULL;
  enum mtpq_status st = mtpq_traces_open(traces, &tf, &err);
  int64_t kd = 3, P = 192;
  if (!st) st = mtpq_traces_meta_int(tf, "k", 1, MTPQ_MAX_K, 3, &kd, &err);
  if (!st) st = mtpq_traces_meta_int(tf, "prompt_len", 1, INT64_MAX, 0, &P, &err);
  if (st) {
    mtpq_traces_close(tf);
    if (made[0]) unlink(made);
    return cli_fail(st, &err);
  }
  int k = (int)cli_uint(bench_accept_opts, &a, "k", (unsigned long long)kd);
  P = (int64_t)cli_uint(bench_accept_opts, &a, "prompt-len", (unsigned long long)P);
  int per_trace = 0; /* P 0: each trace's own prompt_len.NAME (mtpq traces' prompts of different lengths) */
  for (size_t i = 0; P == 0 && i < mtpq_traces_count(tf); i++) per_trace |= mtpq_traces_at(tf, i)->prompt_len > 0;
  if (P == 0 && !per_trace) P = 192;
  int window = (int)cli_uint(bench_accept_opts, &a, "draft-window", 0);
  if (k < 1 || k > MTPQ_MAX_K) {
    mtpq_traces_close(tf);
    if (made[0]) unlink(made);
    return cli_usage_error(cmd, "-k must be 1..%d", MTPQ_MAX_K);
  }
  if (be == MTPQ_BACKEND_CUDA && cli_verbosity >= 2) {
    char settings[512];
    if (mtpq_cuda_settings(settings, sizeof settings, &err) == MTPQ_OK) cli_note("CUDA settings: %s", settings);
  }
  static struct result res[MAX_DRAFTERS];
  memset(res, 0, sizeof res);
  int nr = 1 + a.set[idr], rc = 0;
  for (int d = 0; d < nr && !rc; d++) {
    struct result *r = &res[d];
    r->path = d ? a.multi[idr][d - 1] : NULL;
    struct mtpq_rt_model *dr = NULL;
    st = mtpq_rt_model_open(target, r->path, &dr, &err);
    if (!st) st = mtpq_replay_traces(dr, be, tf, P, k, window, &r->r, &err);
    if (!st && nr > 1) st = mtpq_first_drafts(dr, be, tf, P, &r->fd, &r->truth, &r->nfd, &err); /* (pairs) */
    if (st) rc = cli_fail(st, &err);
    mtpq_rt_model_close(dr);
  }
  mtpq_traces_close(tf);
  if (made[0]) unlink(made);
  struct paired pr[MAX_DRAFTERS];
  for (int d = 0; d < nr && !rc; d++) pr[d] = pair_first(&res[0], &res[d]);
  /* intervals over traces; a drafter's differences paired with stock's on the same traces */
  static struct mtpq_accept_ci ci_all[MAX_DRAFTERS], ci_dom[MAX_DRAFTERS][MTPQ_MAX_DOMAINS];
  const int ndom = res[0].r.ndom;
  int *sel = rc ? NULL : malloc((res[0].r.ntr ? res[0].r.ntr : 1) * sizeof *sel);
  if (!rc && !sel) rc = cli_fail(mtpq_err_set(&err, MTPQ_E_NOMEM, "out of memory"), &err);
  for (int d = 0; d < nr && !rc; d++) {
    const struct mtpq_accept_stats *b = d ? res[0].r.tr : NULL;
    st = mtpq_accept_bootstrap(res[d].r.tr, b, NULL, res[d].r.ntr, 0, &ci_all[d], &err);
    for (int j = 0; j < ndom && !st; j++) {
      size_t m = 0;
      for (size_t i = 0; i < res[0].r.ntr; i++)
        if (res[0].r.tr_dom[i] == j) sel[m++] = (int)i;
      st = mtpq_accept_bootstrap(res[d].r.tr, b, sel, m, 0, &ci_dom[d][j], &err);
    }
    if (st) rc = cli_fail(st, &err);
  }
  free(sel);
  for (int d = 0; d < nr; d++) free(res[d].fd), free(res[d].truth), mtpq_accept_report_free(&res[d].r);
  if (rc) return rc;
  const char *plot = cli_str(bench_accept_opts, &a, "plot");
  if (plot) {
    struct cli_plot_series ps[MAX_DRAFTERS];
    const char *doms[MTPQ_MAX_DOMAINS];
    for (int j = 0; j < ndom; j++) doms[j] = res[0].r.dom[j];
    for (int d = 0; d < nr; d++) {
      const char *nm = res[d].path ? strrchr(res[d].path, '/') : NULL;
      ps[d].name = res[d].path ? (nm && nm[1] ? nm + 1 : res[d].path) : "stock (target mtp.*)";
      ps[d].all = &ci_all[d], ps[d].dom = d ? ci_dom[d] : NULL;
    }
    if (cli_acceptance_svg(plot, "Acceptance, greedy replay of the traces", "traces", ps, nr, k, doms, ndom) != 0) {
      cli_error("%s: cannot write the plot", plot);
      return MTPQ_EXIT_IO;
    }
  }
  if (cli_has(bench_accept_opts, &a, "json")) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "k", k);
    if (P)
      cJSON_AddNumberToObject(o, "prompt_len", (double)P);
    else
      cJSON_AddStringToObject(o, "prompt_len", "per trace");
    cJSON_AddStringToObject(o, "traces", traces);
    cJSON_AddStringToObject(o, "backend", be == MTPQ_BACKEND_CUDA ? "cuda" : "cpu");
    cJSON_AddStringToObject(o, "intervals",
                            "95%, percentile bootstrap over traces (2000 resamples; differences to stock "
                            "paired: the same traces resampled for both)");
    cJSON *arr = cJSON_AddArrayToObject(o, "drafters");
    for (int d = 0; d < nr; d++) {
      cJSON *x = cJSON_CreateObject();
      cJSON_AddStringToObject(x, "path", res[d].path ? res[d].path : target);
      cJSON_AddStringToObject(x, "kind", res[d].path ? "drafter" : "stock");
      struct mtpq_err derr = {0}; /* the weights measured, for quantize --acceptance (from the repo's manifest) */
      cJSON *wd = res[d].path ? mtpq_drafter_digests(res[d].path, 1, &derr) : NULL;
      if (wd) cJSON_AddItemToObject(x, "weights_sha256", wd);
      cJSON *doms = cJSON_AddObjectToObject(x, "domains");
      for (int i = 0; i < res[d].r.ndom; i++)
        cJSON_AddItemToObject(doms, res[d].r.dom[i], stats_json(&res[d].r.st[i], &ci_dom[d][i]));
      cJSON_AddItemToObject(x, "all", stats_json(&res[d].r.all, &ci_all[d]));
      cJSON *fj = nr > 1 ? cJSON_AddObjectToObject(x, "first_draft") : NULL;
      if (fj) cJSON_AddNumberToObject(fj, "positions", (double)res[d].nfd);
      if (fj) cJSON_AddNumberToObject(fj, "accuracy", pr[d].acc);
      if (fj && d) {
        cJSON_AddNumberToObject(fj, "agreement_with_stock", pr[d].agree);
        cJSON_AddNumberToObject(fj, "accuracy_diff_vs_stock", pr[d].diff);
        cJSON_AddNumberToObject(fj, "accuracy_diff_ci95", pr[d].ci);
      }
      cJSON_AddItemToArray(arr, x);
    }
    char *t = cJSON_Print(o);
    puts(t);
    free(t);
    cJSON_Delete(o);
    return 0;
  }
  char plen[48];
  if (P)
    snprintf(plen, sizeof plen, "prompt %lld tokens", (long long)P);
  else
    snprintf(plen, sizeof plen, "each trace's own prompt length");
  printf("bench-acceptance: k = %d, %s, %s backend, greedy replay of %s\n", k, plen,
         be == MTPQ_BACKEND_CUDA ? "cuda" : "cpu", traces);
  printf("%-16s %-34s %7s %7s", "domain", "drafter", "drafts", "MAL");
  for (int i = 0; i < k; i++) printf("  cond%-3d", i + 1);
  for (int i = 0; i < k; i++) printf("  pos%-4d", i + 1);
  printf(" %9s %9s %9s\n", "step us", "round us", "tok/s");
  for (int di = 0; di <= res[0].r.ndom; di++) {
    const int all = di == res[0].r.ndom;
    for (int d = 0; d < nr; d++) {
      const struct mtpq_accept_stats *s = all ? &res[d].r.all : &res[d].r.st[di];
      const struct mtpq_accept_stats *base = all ? &res[0].r.all : &res[0].r.st[di];
      const char *name = res[d].path ? res[d].path : "stock (target mtp.*)";
      printf("%-16s %-34.34s %7llu %7.4f", d ? "" : (all ? "all" : res[0].r.dom[di]), name,
             (unsigned long long)s->drafts, mtpq_accept_mal(s));
      for (int i = 0; i < k; i++) printf("  %7.4f", mtpq_accept_cond(s, i));
      for (int i = 0; i < k; i++) printf("  %7.4f", mtpq_accept_perpos(s, i));
      printf(" %9.1f %9.1f %9.0f\n", mtpq_accept_step_us(s), mtpq_accept_round_us(s), mtpq_accept_tokens_per_s(s));
      const struct mtpq_accept_ci *ci = all ? &ci_all[d] : &ci_dom[d][di];
      print_ci_row(ci, 0);
      if (d) {
        printf("%-16s %-34s %7s %+7.4f", "", "  difference vs stock", "", mtpq_accept_mal(s) - mtpq_accept_mal(base));
        for (int i = 0; i < k; i++) printf("  %+7.4f", mtpq_accept_cond(s, i) - mtpq_accept_cond(base, i));
        for (int i = 0; i < k; i++) printf("  %+7.4f", mtpq_accept_perpos(s, i) - mtpq_accept_perpos(base, i));
        if (mtpq_accept_step_us(s) > 0 && mtpq_accept_round_us(s) > 0)
          printf(" %8.2fx %8.2fx\n", mtpq_accept_step_us(base) / mtpq_accept_step_us(s), mtpq_accept_round_us(base) / mtpq_accept_round_us(s));
        else
          printf("\n");
        print_ci_row(ci, 1);
      }
    }
  }
  if (nr > 1) {
    printf("first drafts, teacher-forced at each of %zu positions (the draft each round starts with, run over the "
           "target's own tokens and hidden states), paired with stock's at the same positions:\n",
           res[0].nfd);
    printf("  %-34s right %.4f\n", "stock (target mtp.*)", pr[0].acc);
  }
  for (int d = 1; d < nr; d++)
    printf("  %-34.34s right %.4f, the same draft as stock %.4f, accuracy vs stock %+.4f +- %.4f (95%%, paired)\n",
           res[d].path, pr[d].acc, pr[d].agree, pr[d].diff, pr[d].ci);
  printf("95%% intervals: percentile bootstrap over the traces (%zu in all), %d resamples; a difference's interval "
         "resamples the same traces for both drafters (paired)\n",
         ci_all[0].units, MTPQ_BOOTSTRAP_ITERS);
  printf("MAL = mean acceptance length (1 + accepted / drafts); cond = P(draft i accepted | drafts before it "
         "accepted); pos = accepted at position i / drafts (vLLM's per-position rate)\n");
  if (be == MTPQ_BACKEND_CPU)
    printf("the CPU backend is the float32 scalar reference: its timings (step us, round us, tok/s) say nothing of a "
           "GPU's, where the quantized drafter's step is the faster one (tests/bench/PERFORMANCE.md)\n");
  printf("step us = drafter wall time per drafted token (the head on the catch-up output, then steps 2..k in one "
         "draft call); round us = drafter time per round (drafting + catching up on the verified slots, the prompt "
         "pass left out); tok/s = drafted tokens / drafter time; the difference rows give stock / this (speedup)\n");
  return 0;
}
