/* The model card's evidence sections; see quant/card.h. */
#include "quant/card.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "io/util.h"

__attribute__((format(printf, 2, 3))) static void bprintf(struct mtpq__buf *b, const char *fmt, ...) {
  char tmp[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) mtpq__buf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static double num(const cJSON *o, const char *k, double dflt) {
  const cJSON *v = get(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}
static const char *str(const cJSON *o, const char *k, const char *dflt) {
  const cJSON *v = get(o, k);
  return cJSON_IsString(v) ? v->valuestring : dflt;
}
/* [lo, hi] of a two-number array, 0 when it is not one */
static int pair(const cJSON *a, double v[2]) {
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 2) return 0;
  const cJSON *x = cJSON_GetArrayItem(a, 0), *y = cJSON_GetArrayItem(a, 1);
  if (!cJSON_IsNumber(x) || !cJSON_IsNumber(y)) return 0;
  v[0] = x->valuedouble, v[1] = y->valuedouble;
  return 1;
}

static int is_weights(const char *name) {
  const size_t n = strlen(name);
  return n > 12 && !strcmp(name + n - 12, ".safetensors");
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

cJSON *mtpq_drafter_digests(const char *dir, int from_manifest, struct mtpq_err *err) {
  if (from_manifest) {
    char *path = mtpq__path_join(dir, "mtpq_manifest.json"), *text = NULL;
    size_t n = 0;
    if (!path) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory"), NULL;
    cJSON *out = NULL;
    if (mtpq__is_file(path) && mtpq__read_file(path, 1 << 24, &text, &n, err) == MTPQ_OK) {
      cJSON *j = mtpq__json_parse(text, n, path, MTPQ_E_BAD_VALUE, err);
      const cJSON *f;
      out = j ? cJSON_CreateObject() : NULL;
      cJSON_ArrayForEach(f, get(j, "files")) {
        const char *h = str(f, "sha256", NULL);
        if (f->string && is_weights(f->string) && h) cJSON_AddStringToObject(out, f->string, h);
      }
      cJSON_Delete(j);
    }
    free(text), free(path);
    return out;
  }
  DIR *d = opendir(dir);
  if (!d) return mtpq_err_set(err, MTPQ_E_IO_OPEN, "%s: cannot list", dir), NULL;
  char *names[256];
  size_t nn = 0;
  struct dirent *e;
  int oom = 0;
  while ((e = readdir(d)) != NULL && nn < 256)
    if (e->d_name[0] != '.' && is_weights(e->d_name)) {
      if ((names[nn] = mtpq__strdup(e->d_name)))
        nn++;
      else
        oom = 1;
    }
  closedir(d);
  qsort(names, nn, sizeof *names, cmp_str);
  cJSON *out = oom ? NULL : cJSON_CreateObject();
  if (!out) mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  for (size_t i = 0; i < nn && out; i++) {
    char *path = names[i] ? mtpq__path_join(dir, names[i]) : NULL, hex[65];
    if (!path || mtpq__file_digest(path, 0, hex, NULL, err) != MTPQ_OK) {
      if (!path) mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      cJSON_Delete(out), out = NULL;
    } else {
      cJSON_AddStringToObject(out, names[i], hex);
    }
    free(path);
  }
  for (size_t i = 0; i < nn; i++) free(names[i]);
  return out;
}

/* one table row: a domain's stock and drafter stats */
static void row(struct mtpq__buf *b, const char *dom, const cJSON *s0, const cJSON *s1) {
  double c0[2] = {0, 0}, c1[2] = {0, 0}, dc[2] = {0, 0};
  pair(get(s0, "mal_ci95"), c0), pair(get(s1, "mal_ci95"), c1);
  const cJSON *v = get(s1, "vs_stock");
  const int has_d = pair(get(v, "mal_diff_ci95"), dc);
  bprintf(b, "| %s | %.3f [%.3f, %.3f] | %.3f [%.3f, %.3f] | ", dom, num(s0, "mean_acceptance_length", 0), c0[0], c0[1],
          num(s1, "mean_acceptance_length", 0), c1[0], c1[1]);
  if (has_d)
    bprintf(b, "%+.3f [%+.3f, %+.3f]", num(v, "mal_diff", 0), dc[0], dc[1]);
  else
    bprintf(b, "%+.3f", num(s1, "mean_acceptance_length", 0) - num(s0, "mean_acceptance_length", 0));
  bprintf(b, " | ");
  for (int w = 0; w < 2; w++) {
    const cJSON *pp = get(w ? s1 : s0, "per_position"), *x;
    int i = 0;
    cJSON_ArrayForEach(x, pp) bprintf(b, "%s%.3f", i++ ? " / " : "", cJSON_IsNumber(x) ? x->valuedouble : 0.0);
    bprintf(b, w ? " |\n" : " &#8594; ");
  }
}

/* the entry of the report's drafters or runs whose weights are those in dir */
static const cJSON *find_measured(const cJSON *list, const cJSON *mine) {
  const cJSON *x;
  cJSON_ArrayForEach(x, list) {
    const cJSON *w = get(x, "weights_sha256");
    if (cJSON_IsObject(w) && cJSON_Compare(w, mine, 1)) return x;
  }
  return NULL;
}

/* the report, parsed, when it has a form the card can use: its drafters
 * (bench-acceptance) or runs (bench-decode) with the stock drafter's */
static cJSON *read_report(const char *file, const cJSON **list, const cJSON **stock, int *decode,
                          struct mtpq_err *err) {
  char *text = NULL;
  size_t n = 0;
  if (mtpq__read_file(file, (size_t)1 << 30, &text, &n, err)) return NULL;
  cJSON *j = mtpq__json_parse(text, n, file, MTPQ_E_BAD_VALUE, err);
  free(text);
  if (!j) return NULL;
  const cJSON *runs = get(j, "runs");
  *decode = cJSON_IsArray(runs);
  *list = *decode ? runs : get(j, "drafters");
  *stock = cJSON_GetArrayItem(*list, *decode ? 1 : 0);
  if (!cJSON_IsArray(*list) || !*stock || !get(*stock, "all") || !get(get(*stock, "all"), "mal_ci95")) {
    cJSON_Delete(j);
    mtpq_err_set(err, MTPQ_E_BAD_VALUE,
                 "%s: not a bench-acceptance or bench-decode --json report (with the stock drafter and intervals)",
                 file);
    return NULL;
  }
  if (get(j, "accept_pattern")) {
    cJSON_Delete(j);
    mtpq_err_set(err, MTPQ_E_BAD_VALUE,
                 "%s: a throughput run (--accept-pattern replays acceptance, it does not measure it)", file);
    return NULL;
  }
  return j;
}

enum mtpq_status mtpq_card_report_check(const char *file, struct mtpq_err *err) {
  const cJSON *list, *stock;
  int decode;
  cJSON *j = read_report(file, &list, &stock, &decode, err);
  cJSON_Delete(j);
  return j ? MTPQ_OK : err->status;
}

static enum mtpq_status acceptance(const char *file, const char *dir, struct mtpq__buf *b, struct mtpq_err *err) {
  const cJSON *list, *stock;
  int decode;
  cJSON *j = read_report(file, &list, &stock, &decode, err);
  if (!j) return err->status;
  const cJSON *runs = decode ? list : NULL;
  cJSON *mine = mtpq_drafter_digests(dir, 0, err);
  if (!mine) {
    cJSON_Delete(j);
    return err->status ? err->status : MTPQ_E_NOMEM;
  }
  const cJSON *me = find_measured(list, mine);
  cJSON_Delete(mine);
  if (!me) {
    cJSON_Delete(j);
    return mtpq_err_set(err, MTPQ_E_BAD_VALUE,
                        "%s: no drafter in this report has the weights quantize wrote (measure the repo this command "
                        "writes, then run it again with --acceptance: the bytes are the same)",
                        file);
  }
  const char *unit = decode ? "prompts" : "traces";
  if (decode)
    bprintf(b,
            "Measured with `mtpq bench-decode` (the live draft/verify loop with the target model; %s, k = %g, "
            "batch %g, %g prompts x %g new tokens, %s backend).",
            num(j, "temperature", 0) > 0 ? "sampled" : "greedy", num(j, "k", 0), num(j, "batch", 1),
            num(j, "prompts", 0), num(j, "new_tokens", 0), str(j, "backend", "?"));
  else
    bprintf(b,
            "Measured with `mtpq bench-acceptance` (greedy replay of the target's traces `%s`, k = %g, %s backend; "
            "the replay quantizes weights only, while vLLM also quantizes the FP8 linears' activations).",
            str(j, "traces", "?"), num(j, "k", 0), str(j, "backend", "?"));
  bprintf(b,
          " MAL: mean acceptance length (1 + accepted drafts per round). 95%% intervals: percentile bootstrap over "
          "the %s; the difference resamples the same %s for both drafters (paired).\n\n",
          unit, unit);
  bprintf(b, "| domain | stock MTP: MAL [95%%] | this drafter: MAL [95%%] | difference [95%%] | per-position "
             "acceptance, stock &#8594; this |\n|---|---|---|---|---|\n");
  const cJSON *d0 = get(stock, "domains"), *d;
  cJSON_ArrayForEach(d, d0) {
    const cJSON *d1 = get(get(me, "domains"), d->string);
    if (d1) row(b, d->string, d, d1);
  }
  row(b, "all", get(stock, "all"), get(me, "all"));
  const cJSON *fd = get(me, "first_draft");
  if (fd && get(fd, "agreement_with_stock"))
    bprintf(b,
            "\nFirst drafts, teacher-forced at %g positions: the same draft as stock at %.4f of them; accuracy "
            "%.4f vs stock's %.4f (difference %+.4f +- %.4f, 95%%, paired).\n",
            num(fd, "positions", 0), num(fd, "agreement_with_stock", 0), num(fd, "accuracy", 0),
            num(fd, "accuracy", 0) - num(fd, "accuracy_diff_vs_stock", 0), num(fd, "accuracy_diff_vs_stock", 0),
            num(fd, "accuracy_diff_ci95", 0));
  if (decode)
    bprintf(b, "\nTokens/s on that machine: no speculation %.1f, stock MTP %.1f, this drafter %.1f (%.3fx stock).\n",
            num(cJSON_GetArrayItem(runs, 0), "tokens_per_s", 0), num(stock, "tokens_per_s", 0),
            num(me, "tokens_per_s", 0), num(me, "speedup_vs_stock", 0));
  cJSON_Delete(j);
  return MTPQ_OK;
}

/* build-vocab's PREFIX.json beside PREFIX.safetensors (nothing when absent) */
static void vocab_section(const char *ids, struct mtpq__buf *b) {
  const size_t n = strlen(ids);
  if (n < 12 || strcmp(ids + n - 12, ".safetensors")) return;
  char path[4096], *text = NULL;
  snprintf(path, sizeof path, "%.*s.json", (int)(n - 12), ids);
  size_t len = 0;
  struct mtpq_err e = {0};
  if (!mtpq__is_file(path) || mtpq__read_file(path, 1 << 24, &text, &len, &e)) return;
  cJSON *j = cJSON_ParseWithLength(text, len);
  free(text);
  const cJSON *c = get(j, "corpus");
  if (!c) {
    cJSON_Delete(j);
    return;
  }
  bprintf(b,
          "## Draft vocabulary\n\n%g ids: the most frequent output tokens of the corpora below (%.0f tokens, "
          "%.0f weighted), plus %g forced ids (special and single-character tokens not among them), by `mtpq "
          "build-vocab` with "
          "the target's tokenizer.\n\n| corpus | kind | weight | tokens |\n|---|---|---|---|\n",
          num(j, "size", 0), num(c, "tokens", 0), num(c, "weighted_tokens", 0), num(get(j, "forced"), "added", 0));
  const cJSON *x;
  cJSON_ArrayForEach(x, get(c, "inputs")) {
    const char *p = str(x, "path", "?"), *base = strrchr(p, '/');
    bprintf(b, "| %s | %s | %g | %.0f |\n", base ? base + 1 : p, str(x, "kind", "?"), num(x, "weight", 1),
            num(x, "tokens", 0));
  }
  const cJSON *h = get(j, "heldout");
  if (cJSON_GetArraySize(h) > 0) {
    bprintf(b, "\nHeld-out coverage (the share of a held-out corpus's output tokens the vocabulary holds):\n\n"
               "| held-out corpus | coverage |\n|---|---|\n");
    cJSON_ArrayForEach(x, h) bprintf(b, "| %s | %.4f |\n", x->string, num(x, "coverage", 0));
  }
  bprintf(b, "\n");
  cJSON_Delete(j);
}

enum mtpq_status mtpq__card_evidence(const struct mtpq_drafter_params *p, const char *dir, char **md,
                                     struct mtpq_err *err) {
  struct mtpq__buf b = {0};
  *md = NULL;
  if (p->acceptance) {
    bprintf(&b, "## Measured acceptance\n\n");
    enum mtpq_status st = acceptance(p->acceptance, dir, &b, err);
    if (st) {
      free(b.p);
      return st;
    }
    bprintf(&b, "\n"); /* each section ends with a blank line */
  }
  vocab_section(p->vocab_ids, &b);
  if (p->command) {
    bprintf(&b, "## How this repo was made\n\n```sh\n");
    mtpq__buf_put(&b, p->command, strlen(p->command));
    bprintf(&b, "\n```\n\n");
  }
  mtpq__buf_put(&b, "", 1);
  if (b.oom) {
    free(b.p);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  *md = b.p;
  return MTPQ_OK;
}
