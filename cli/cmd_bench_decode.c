/* mtpq bench-decode: live speculative decoding with the target model in the
 * runtime (kernels/decode.h), greedy or sampled: every prompt decoded
 * without speculation, with the stock drafter (the target's mtp.*) and with
 * each --drafter; acceptance per position and MAL with 95% intervals,
 * tokens/s, speedups, where the time went, and (greedy) whether every
 * output equals the output without speculation (it must: greedy
 * speculation is lossless; sampled outputs are distributed as the
 * target's, which tests/check_sample.c proves, not equal). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/json.h"
#include "cli/cli.h"
#include "io/util.h"
#include "kernels/accept_ci.h"
#include "kernels/decode.h"
#include "kernels/record.h"
#include "kernels/replay.h"
#include "kernels/runtime.h"
#include "kernels/target.h"
#include "quant/card.h"

const struct cli_opt bench_decode_opts[] = {
    {"target", 0, OPT_STR, 0, "DIR", "target repo (its mtp.* is the stock drafter; required)"},
    {"drafter", 0, OPT_STR, OPT_MULTI, "DIR", "an mtpq drafter repo to compare with stock (repeatable)"},
    {"prompts", 'p', OPT_STR, OPT_MULTI, "FILE",
     "prompts (as mtpq traces reads them; repeatable; the file's name is the domain; required)"},
    {"text-field", 0, OPT_STR, 0, "NAME", "the JSONL field holding a prompt (default text)"},
    {"chat", 0, OPT_FLAG, 0, NULL, "JSONL prompts are chats (\"messages\"), rendered with Qwen's ChatML"},
    {"new-tokens", 'n', OPT_UINT, 0, "N", "tokens generated after each prompt (default 96)"},
    {"k", 'k', OPT_UINT, 0, "N", "draft tokens per round (default 3; CUDA: 1..7)"},
    {"temperature", 0, OPT_REAL, 0, "X", "sample at temperature X (default 0: greedy)"},
    {"top-p", 0, OPT_REAL, 0, "P", "sampling: keep the most probable tokens up to mass P (default 1: all)"},
    {"top-k", 0, OPT_UINT, 0, "N", "sampling: keep the N most probable tokens (default 0: all)"},
    {"seed", 0, OPT_UINT, 0, "S", "sampling: the random seed (default 0; prompt i draws from stream i)"},
    {"batch", 'b', OPT_UINT, 0, "B",
     "decode B prompts together, 1..8, with ragged acceptance (default 1; tokens/s counts all B)"},
    {"backend", 0, OPT_STR, 0, "auto|cpu|cuda", "runtime backend (default auto: cuda when a GPU is present)"},
    {"plot", 0, OPT_STR, 0, "FILE.svg", "write an SVG plot of per-position acceptance with 95% intervals"},
    {"accept-pattern", 0, OPT_STR, 0, "FILE.json",
     "throughput runs: each round accepts as many drafts as the same round of an earlier run at the same k did (its "
     "--json report's accepted_per_round, drafter by drafter, cycled) instead of comparing (sampled: instead of the "
     "rejection steps); the output is then not the target's, and not checked"},
    {"trunk", 0, OPT_STR, 0, "synthetic:NAME",
     "throughput runs: a trunk with random weights of that shape (qwen3-next-80b; NVIDIA's NVFP4 layout, made in "
     "memory) instead of the target's; --target gives the drafters; needs --accept-pattern"},
    {"context", 0, OPT_UINT, 0, "N",
     "throughput runs: each prompt starts at position N, as if N tokens were cached (their rows are zeros); needs "
     "--accept-pattern"},
    {"json", 0, OPT_FLAG, 0, NULL, "print the JSON report"},
    {NULL, 0, 0, 0, NULL, NULL},
};

#define MAX_RUNS 10 /* no speculation, stock, up to 8 drafters */

struct run {
  const char *name;
  struct mtpq_rt_model *d; /* NULL: no speculation */
  struct mtpq_accept_stats all, dom[MTPQ_MAX_DOMAINS];
  struct mtpq_accept_stats *seq;                   /* each prompt's own counts: the units of the intervals */
  struct mtpq_accept_ci ci, dci[MTPQ_MAX_DOMAINS]; /* over all prompts and per domain; paired with stock */
  struct mtpq_decode_times tm;
  int64_t tokens;             /* generated */
  int lossless;               /* every output equal to the one without speculation */
  struct mtpq_decode_bench b; /* the rounds' accepted drafts; the pattern replayed */
};

/* The accepted_per_round arrays of FILE, a bench-decode --json report
 * made at the same k: the one of each speculative run (stock first) into
 * runs[1 .. nr) as its pattern. */
static enum mtpq_status read_pattern(const char *file, int k, struct run *runs, int nr, struct mtpq_err *err) {
  char *text = NULL;
  size_t n = 0;
  enum mtpq_status st = mtpq__read_file(file, (size_t)1 << 30, &text, &n, err);
  if (st) return st;
  cJSON *j = mtpq__json_parse(text, n, file, MTPQ_E_BAD_VALUE, err);
  free(text);
  if (!j) return MTPQ_E_BAD_VALUE;
  const cJSON *jk = cJSON_GetObjectItemCaseSensitive(j, "k"), *jr = cJSON_GetObjectItemCaseSensitive(j, "runs");
  if (!cJSON_IsNumber(jk) || !cJSON_IsArray(jr))
    st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: not a bench-decode --json report (no \"k\" and \"runs\")", file);
  else if (jk->valueint != k)
    st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: made at k = %d, this run has k = %d", file, jk->valueint, k);
  else if (cJSON_GetArraySize(jr) < nr)
    st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: %d runs (no speculation, then each drafter); this run needs %d", file,
                      cJSON_GetArraySize(jr), nr);
  for (int r = 1; r < nr && !st; r++) {
    const cJSON *ro = cJSON_GetArrayItem(jr, r), *pa = cJSON_GetObjectItemCaseSensitive(ro, "accepted_per_round");
    const int m = cJSON_GetArraySize(pa);
    if (!cJSON_IsArray(pa) || m < 1) {
      st = mtpq_err_set(
          err, MTPQ_E_BAD_VALUE,
          "%s: run %d has no accepted_per_round (a report of this version's bench-decode --json is needed)", file, r);
      break;
    }
    uint8_t *v = malloc((size_t)m);
    if (!v) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    for (int i = 0; !st && i < m; i++) {
      const cJSON *e = cJSON_GetArrayItem(pa, i);
      if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > k || e->valuedouble != (int)e->valuedouble)
        st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: run %d, round %d: accepted %g is not a count in 0..%d", file, r,
                          i, cJSON_IsNumber(e) ? e->valuedouble : -1.0, k);
      else
        v[i] = (uint8_t)e->valueint;
    }
    runs[r].b.pattern = v, runs[r].b.npattern = m;
  }
  cJSON_Delete(j);
  return st;
}

static void add_times(struct mtpq_decode_times *a, const struct mtpq_decode_times *b) {
  a->prefill_s += b->prefill_s, a->gen_s += b->gen_s, a->target_s += b->target_s, a->draft_s += b->draft_s;
  a->accept_s += b->accept_s;
}

static cJSON *stats_json(const struct mtpq_accept_stats *s, const struct mtpq_accept_ci *ci) {
  cJSON *o = cJSON_CreateObject(), *p = cJSON_AddArrayToObject(o, "per_position"),
        *c = cJSON_AddArrayToObject(o, "per_position_ci95");
  for (int i = 0; i < s->k; i++) {
    cJSON_AddItemToArray(p, cJSON_CreateNumber(mtpq_accept_perpos(s, i)));
    cJSON_AddItemToArray(c, cli_json_pair(ci->perpos_ci[i]));
  }
  cJSON_AddNumberToObject(o, "rounds", (double)s->drafts);
  cJSON_AddNumberToObject(o, "prompts", (double)ci->units);
  cJSON_AddNumberToObject(o, "mean_acceptance_length", mtpq_accept_mal(s));
  cJSON_AddItemToObject(o, "mal_ci95", cli_json_pair(ci->mal_ci));
  if (ci->paired) {
    cJSON *v = cJSON_AddObjectToObject(o, "vs_stock");
    cJSON_AddNumberToObject(v, "mal_diff", ci->dmal);
    cJSON_AddItemToObject(v, "mal_diff_ci95", cli_json_pair(ci->dmal_ci));
  }
  return o;
}

/* the domain of prompt NAME.i: NAME */
static void domain_of(const char *name, char *out, size_t cap) {
  snprintf(out, cap, "%s", name);
  char *dot = strrchr(out, '.');
  if (dot && dot != out) *dot = 0;
}

int cmd_bench_decode(int argc, char **argv) {
  struct cli_args a;
  int help;
  const char *cmd = "bench-decode";
  if (cli_parse(cmd, bench_decode_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  const char *target = cli_str(bench_decode_opts, &a, "target");
  const int ip = cli_opt_index(bench_decode_opts, "prompts"), idr = cli_opt_index(bench_decode_opts, "drafter");
  if (!target || !a.set[ip] || a.npos) return cli_usage_error(cmd, "--target and --prompts are required");
  if (a.set[idr] + 2 > MAX_RUNS) return cli_usage_error(cmd, "at most %d drafters", MAX_RUNS - 2);
  const int64_t n_new = (int64_t)cli_uint(bench_decode_opts, &a, "new-tokens", 96);
  const int k = (int)cli_uint(bench_decode_opts, &a, "k", 3);
  if (n_new < 1 || n_new > 1000000) return cli_usage_error(cmd, "--new-tokens must be 1..1000000");
  struct mtpq_sampling sp = {0.0f, 1.0f, 0, 0};
  const char *tstr = cli_str(bench_decode_opts, &a, "temperature"), *pstr = cli_str(bench_decode_opts, &a, "top-p");
  if (tstr) sp.temperature = (float)atof(tstr);
  if (pstr) sp.top_p = (float)atof(pstr);
  sp.top_k = (int)cli_uint(bench_decode_opts, &a, "top-k", 0);
  sp.seed = (uint64_t)cli_uint(bench_decode_opts, &a, "seed", 0);
  if (!(sp.temperature >= 0 && sp.temperature <= 100)) return cli_usage_error(cmd, "--temperature must be 0..100");
  if (!(sp.top_p > 0 && sp.top_p <= 1)) return cli_usage_error(cmd, "--top-p must be in (0, 1]");
  const int sampled = sp.temperature > 0;
  if (!sampled && (pstr || sp.top_k)) return cli_usage_error(cmd, "--top-p and --top-k need --temperature > 0");
  const int B = (int)cli_uint(bench_decode_opts, &a, "batch", 1);
  if (B < 1 || B > MTPQ_MAX_SEQS) return cli_usage_error(cmd, "--batch must be 1..%d", MTPQ_MAX_SEQS);
  enum mtpq_backend be;
  int rc = cli_backend(cmd, cli_str(bench_decode_opts, &a, "backend"), &be);
  if (rc) return rc;
  const char *pattern = cli_str(bench_decode_opts, &a, "accept-pattern"),
             *trunk = cli_str(bench_decode_opts, &a, "trunk");
  const int64_t ctx0 = (int64_t)cli_uint(bench_decode_opts, &a, "context", 0);
  if ((trunk || ctx0) && !pattern)
    return cli_usage_error(cmd, "--trunk and --context are for throughput runs: they need --accept-pattern");
  const char *tcfg = NULL;
  if (trunk && (strncmp(trunk, "synthetic:", 10) || !(tcfg = mtpq_target_synth_config(trunk + 10))))
    return cli_usage_error(cmd, "--trunk must be synthetic:NAME with a known shape (qwen3-next-80b), not '%s'", trunk);
  if (ctx0 > 1000000) return cli_usage_error(cmd, "--context must be 0..1000000");
  const char *plot = cli_str(bench_decode_opts, &a, "plot");
  if (plot && !cli_out_dir_ok(plot)) { /* before the decodes */
    cli_error("%s: cannot write there (its directory is missing or not writable)", plot);
    return MTPQ_EXIT_IO;
  }
  const int kmax = be == MTPQ_BACKEND_CUDA ? 7 : MTPQ_MAX_K;
  if (k < 1 || k > kmax) return cli_usage_error(cmd, "-k must be 1..%d on the %s backend", kmax, be ? "CUDA" : "CPU");
  struct mtpq_err err = {0};
  struct mtpq_target *t = NULL;
  struct mtpq_prompts p = {0};
  struct run runs[MAX_RUNS];
  memset(runs, 0, sizeof runs);
  int nr = 0;
  enum mtpq_status st =
      tcfg ? mtpq_target_synth(tcfg, MTPQ_SYNTH_NVIDIA, 1, &t, &err) : mtpq_target_open(target, &t, &err);
  const char *field = cli_str(bench_decode_opts, &a, "text-field");
  if (!st)
    st = mtpq_prompts_read_files(a.multi[ip], a.set[ip], target, NULL, field ? field : "text",
                                 cli_has(bench_decode_opts, &a, "chat"), 0, &p, &err);
  runs[nr++].name = "none";
  if (!st) runs[nr].name = "stock", st = mtpq_rt_model_open(target, NULL, &runs[nr].d, &err), nr += !st;
  for (int i = 0; i < a.set[idr] && !st; i++) {
    runs[nr].name = a.multi[idr][i];
    st = mtpq_rt_model_open(target, a.multi[idr][i], &runs[nr].d, &err);
    nr += !st;
  }
  char dom[MTPQ_MAX_DOMAINS][128];
  int nd = 0, *pd = calloc(p.n ? p.n : 1, sizeof *pd);
  for (size_t i = 0; !st && i < p.n; i++) {
    char d[128];
    domain_of(p.v[i].name, d, sizeof d);
    int j = 0;
    while (j < nd && strcmp(dom[j], d)) j++;
    if (j == nd && nd == MTPQ_MAX_DOMAINS)
      st = mtpq_err_set(&err, MTPQ_E_INVAL, "more than %d domains", MTPQ_MAX_DOMAINS);
    else if (j == nd)
      snprintf(dom[nd++], sizeof dom[0], "%s", d);
    pd[i] = j;
  }
  int64_t most = 1;
  for (size_t i = 0; i < p.n; i++) most = p.v[i].n > most ? p.v[i].n : most;
  if (!st && pattern) st = read_pattern(pattern, k, runs, nr, &err);
  for (int r = 1; r < nr && !st; r++)
    if (!(runs[r].seq = calloc(p.n ? p.n : 1, sizeof *runs[r].seq)))
      st = mtpq_err_set(&err, MTPQ_E_NOMEM, "out of memory");
  for (int r = 1; r < nr && !st; r++) { /* room for every round's count: at most n_new a prompt */
    runs[r].b.cap = (int64_t)p.n * n_new, runs[r].b.context = ctx0;
    if (!(runs[r].b.rounds = malloc((size_t)runs[r].b.cap))) st = mtpq_err_set(&err, MTPQ_E_NOMEM, "out of memory");
  }
  runs[0].b.context = ctx0;
  int32_t *base = malloc((size_t)(p.n * (size_t)(most + n_new)) * sizeof *base);
  int32_t *out = malloc((size_t)B * (size_t)(most + n_new) * sizeof *out);
  if (!st && (!base || !out)) st = mtpq_err_set(&err, MTPQ_E_NOMEM, "out of memory");
  for (int r = 0; r < nr && !st; r++) {
    runs[r].lossless = 1, runs[r].all.k = k;
    for (int j = 0; j < nd; j++) runs[r].dom[j].k = k;
    for (size_t i = 0; i < p.n && !st; i += (size_t)B) { /* B prompts at a time (the last group maybe fewer) */
      const int nb = p.n - i < (size_t)B ? (int)(p.n - i) : B;
      struct mtpq_accept_stats s[MTPQ_MAX_SEQS];
      struct mtpq_decode_times tm;
      const int32_t *pr[MTPQ_MAX_SEQS];
      int64_t P[MTPQ_MAX_SEQS];
      int32_t *o[MTPQ_MAX_SEQS];
      memset(s, 0, sizeof s);
      for (int b = 0; b < nb; b++) {
        pr[b] = p.v[i + b].ids, P[b] = p.v[i + b].n;
        o[b] = r == 0 ? base + (i + b) * (size_t)(most + n_new) : out + b * (size_t)(most + n_new);
      }
      st = sampled ? mtpq_decode_sample_batch(t, runs[r].d, be, nb, pr, P, n_new, k, &sp, (uint64_t)i, o, s, &tm,
                                              &runs[r].b, &err)
                   : mtpq_decode_greedy_batch(t, runs[r].d, be, nb, pr, P, n_new, k, o, s, &tm, &runs[r].b, &err);
      if (st) break;
      add_times(&runs[r].tm, &tm);
      runs[r].tokens += nb * n_new;
      for (int b = 0; b < nb && r > 0; b++) {
        s[b].k = k;
        mtpq_accept_add(&runs[r].all, &s[b]), mtpq_accept_add(&runs[r].dom[pd[i + b]], &s[b]);
        runs[r].seq[i + b] = s[b];
        if (!sampled && !pattern)
          runs[r].lossless &=
              !memcmp(o[b], base + (i + b) * (size_t)(most + n_new), (size_t)(P[b] + n_new) * sizeof *o[b]);
      }
      if (cli_verbosity >= 1 && isatty(2))
        fprintf(stderr, "\rbench-decode: %s, %zu/%zu prompts", runs[r].name, i + (size_t)nb, p.n);
    }
    if (cli_verbosity >= 1 && isatty(2)) fputc('\n', stderr);
  }
  if (st) goto done;
  /* intervals over prompts; each drafter's differences paired with stock's on the same prompts */
  for (int r = 1; r < nr && !st; r++) {
    const struct mtpq_accept_stats *b = r > 1 ? runs[1].seq : NULL;
    st = mtpq_accept_bootstrap(runs[r].seq, b, NULL, p.n, 0, &runs[r].ci, &err);
    int *sel = st ? NULL : malloc((p.n ? p.n : 1) * sizeof *sel);
    if (!st && !sel) st = mtpq_err_set(&err, MTPQ_E_NOMEM, "out of memory");
    for (int j = 0; j < nd && !st; j++) {
      size_t m = 0;
      for (size_t i = 0; i < p.n; i++)
        if (pd[i] == j) sel[m++] = (int)i;
      st = mtpq_accept_bootstrap(runs[r].seq, b, sel, m, 0, &runs[r].dci[j], &err);
    }
    free(sel);
  }
  if (st) goto done;
  if (plot && nr > 1) {
    struct cli_plot_series ps[MAX_RUNS];
    const char *doms[MTPQ_MAX_DOMAINS];
    for (int j = 0; j < nd; j++) doms[j] = dom[j];
    for (int r = 1; r < nr; r++) {
      const char *nm = strrchr(runs[r].name, '/');
      ps[r - 1].name = nm && nm[1] ? nm + 1 : runs[r].name;
      ps[r - 1].all = &runs[r].ci, ps[r - 1].dom = r > 1 ? runs[r].dci : NULL;
    }
    if (cli_acceptance_svg(plot, sampled ? "Acceptance, live loop (sampled)" : "Acceptance, live loop (greedy)",
                           "prompts", ps, nr - 1, k, doms, nd) != 0)
      st = mtpq_err_set(&err, MTPQ_E_IO_WRITE, "%s: cannot write the plot", plot);
  }
  if (st) goto done;
  const double tps0 = (double)runs[0].tokens / runs[0].tm.gen_s;
  const double tps1 = nr > 1 ? (double)runs[1].tokens / runs[1].tm.gen_s : 0;
  if (cli_has(bench_decode_opts, &a, "json")) {
    cJSON *jo = cJSON_CreateObject(), *ra = cJSON_AddArrayToObject(jo, "runs");
    cJSON_AddStringToObject(jo, "target", target);
    cJSON_AddStringToObject(jo, "backend", be == MTPQ_BACKEND_CUDA ? "cuda" : "cpu");
    cJSON_AddNumberToObject(jo, "k", k);
    cJSON_AddNumberToObject(jo, "batch", B);
    cJSON_AddNumberToObject(jo, "temperature", sp.temperature);
    if (sampled) {
      cJSON_AddNumberToObject(jo, "top_p", sp.top_p);
      cJSON_AddNumberToObject(jo, "top_k", sp.top_k);
      cJSON_AddNumberToObject(jo, "seed", (double)sp.seed);
    }
    cJSON_AddNumberToObject(jo, "prompts", (double)p.n);
    cJSON_AddNumberToObject(jo, "new_tokens", (double)n_new);
    if (pattern) cJSON_AddStringToObject(jo, "accept_pattern", pattern);
    if (trunk) cJSON_AddStringToObject(jo, "trunk", trunk);
    cJSON_AddNumberToObject(jo, "context", (double)ctx0);
    cJSON_AddStringToObject(jo, "intervals",
                            "95%, percentile bootstrap over prompts (2000 resamples; differences to "
                            "stock paired: the same prompts resampled for both)");
    for (int r = 0; r < nr; r++) {
      cJSON *o = cJSON_CreateObject();
      const double tps = (double)runs[r].tokens / runs[r].tm.gen_s;
      cJSON_AddStringToObject(o, "drafter", runs[r].name);
      struct mtpq_err derr = {0}; /* the weights measured, for quantize --acceptance (from the repo's manifest) */
      cJSON *wd = r > 1 ? mtpq_drafter_digests(runs[r].name, 1, &derr) : NULL;
      if (wd) cJSON_AddItemToObject(o, "weights_sha256", wd);
      cJSON_AddNumberToObject(o, "tokens_per_s", tps);
      cJSON_AddNumberToObject(o, "speedup_vs_none", tps / tps0);
      if (nr > 1 && r > 0) cJSON_AddNumberToObject(o, "speedup_vs_stock", tps / tps1);
      cJSON_AddNumberToObject(o, "prefill_s", runs[r].tm.prefill_s);
      cJSON_AddNumberToObject(o, "generate_s", runs[r].tm.gen_s);
      cJSON_AddNumberToObject(o, "target_s", runs[r].tm.target_s);
      cJSON_AddNumberToObject(o, "draft_s", runs[r].tm.draft_s);
      cJSON_AddNumberToObject(o, "accept_s", runs[r].tm.accept_s);
      if (!sampled && !pattern) cJSON_AddBoolToObject(o, "output_equals_no_speculation", runs[r].lossless);
      if (r > 0) {
        cJSON_AddItemToObject(o, "all", stats_json(&runs[r].all, &runs[r].ci));
        if (runs[r].b.rounds) {
          cJSON *pr = cJSON_AddArrayToObject(o, "accepted_per_round");
          for (int64_t i = 0; i < runs[r].b.nrounds; i++)
            cJSON_AddItemToArray(pr, cJSON_CreateNumber(runs[r].b.rounds[i]));
        }
        cJSON *dj = cJSON_AddObjectToObject(o, "domains");
        for (int j = 0; j < nd; j++) cJSON_AddItemToObject(dj, dom[j], stats_json(&runs[r].dom[j], &runs[r].dci[j]));
      }
      cJSON_AddItemToArray(ra, o);
    }
    char *s = cJSON_Print(jo);
    puts(s);
    free(s);
    cJSON_Delete(jo);
  } else {
    char how[96] = "greedy";
    if (sampled)
      snprintf(how, sizeof how, "sampled (temperature %g, top-p %g, top-k %d, seed %llu)", sp.temperature, sp.top_p,
               sp.top_k, (unsigned long long)sp.seed);
    printf("bench-decode: %s%s%s, %s backend, %s, k = %d, batch %d, %zu prompts x %lld new tokens (%d domains)\n",
           target, trunk ? " with the trunk " : "", trunk ? trunk : "",
           be == MTPQ_BACKEND_CUDA ? "CUDA" : "CPU reference", how, k, B, p.n, (long long)n_new, nd);
    if (pattern)
      printf("throughput run: each round accepts what the same round of %s accepted (not the drafts' agreement: the "
             "MAL below is that run's), from position %lld; outputs not checked\n",
             pattern, (long long)ctx0);
    printf("%-28s %9s %8s %8s %22s %8s %8s %8s %8s %9s\n", "drafter", "tokens/s", "vs none", "vs stock",
           "MAL [95% interval]", "target%", "draft%", "accept%", "other%", "lossless");
    for (int r = 0; r < nr; r++) {
      const struct run *x = &runs[r];
      const double tps = (double)x->tokens / x->tm.gen_s, g = x->tm.gen_s;
      char mal[48] = "-";
      if (r > 0) snprintf(mal, sizeof mal, "%.3f [%.3f, %.3f]", x->ci.mal, x->ci.mal_ci[0], x->ci.mal_ci[1]);
      const char *nm = strrchr(x->name, '/');
      nm = nm && nm[1] ? nm + 1 : x->name;
      char vs[16] = "-";
      if (r > 1) snprintf(vs, sizeof vs, "%.3f", tps / tps1);
      const double other = g - x->tm.target_s - x->tm.draft_s - x->tm.accept_s;
      printf("%-28.28s %9.1f %8.3f %8s %22s %8.1f %8.1f %8.1f %8.1f %9s\n", nm, tps, tps / tps0, vs, mal,
             100 * x->tm.target_s / g, 100 * x->tm.draft_s / g, 100 * x->tm.accept_s / g, 100 * other / g,
             r && !sampled && !pattern ? (x->lossless ? "yes" : "NO") : "-");
    }
    for (int r = 1; r < nr; r++) {
      const char *nm = strrchr(runs[r].name, '/');
      nm = nm && nm[1] ? nm + 1 : runs[r].name;
      for (int j = 0; j < nd; j++) {
        const struct mtpq_accept_stats *s = &runs[r].dom[j];
        const struct mtpq_accept_ci *c = &runs[r].dci[j];
        printf("  %-20.20s %-16.16s MAL %.3f [%.3f, %.3f], per position:", nm, dom[j], mtpq_accept_mal(s), c->mal_ci[0],
               c->mal_ci[1]);
        for (int i = 0; i < k; i++) printf(" %.3f", mtpq_accept_perpos(s, i));
        printf(" (%llu rounds)", (unsigned long long)s->drafts);
        if (c->paired) printf("; vs stock %+.3f [%+.3f, %+.3f]", c->dmal, c->dmal_ci[0], c->dmal_ci[1]);
        printf("\n");
      }
    }
    printf("95%% intervals: percentile bootstrap over the prompts (%zu), %d resamples; vs stock: the MAL "
           "difference, the same prompts resampled for both (paired)\n",
           p.n, MTPQ_BOOTSTRAP_ITERS);
    printf("tokens/s: generated tokens / generation wall time (the prompt's prefill apart: %.2f s in all for no "
           "speculation); target/draft/accept/other: shares of the generation time (accept: the acceptance; sampled, "
           "every distribution drawn from, the draws and the rejection steps, where the backend keeps the "
           "logits)%s\n",
           runs[0].tm.prefill_s,
           be == MTPQ_BACKEND_CPU ? "; the CPU backend is the float32 scalar reference: its speeds say nothing of "
                                    "a GPU's"
                                  : "");
  }
done:
  for (int r = 0; r < nr; r++)
    mtpq_rt_model_close(runs[r].d), free(runs[r].b.rounds), free((void *)runs[r].b.pattern), free(runs[r].seq);
  mtpq_prompts_free(&p);
  mtpq_target_close(t);
  free(base), free(out), free(pd);
  if (st) return cli_fail(st, &err);
  for (int r = 1; r < nr && !sampled && !pattern; r++)
    if (!runs[r].lossless) {
      cli_error("%s: the speculative output differs from the output without speculation", runs[r].name);
      return MTPQ_EXIT_DIFFERS;
    }
  return 0;
}
