/* Draft-vocabulary selection, coverage and outputs; see vocab/vocab.h. */
#include "vocab/vocab.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/json.h"
#include "io/safetensors.h"
#include "io/torch_pt.h"
#include "io/util.h"
#include "vocab/corpus.h"
#include "vocab/tokenizer.h"
#include "vocab/unicode.h"

static const int64_t COMPARE_SIZES[] = {32768, 65536, 98304, 131072};
#define N_COMPARE 4

enum { CLS_NONE = 0, CLS_ADDED = 1, CLS_SINGLE_CHAR = 2, CLS_SINGLE_UNICODE = 3 };

struct acc { /* counts accumulated per id */
  double *w;
  uint64_t *raw;
  double weight;
  uint64_t tokens;
};

static void add_count(void *ctx, int32_t id, uint64_t count) {
  struct acc *a = ctx;
  a->w[id] += (double)count * a->weight;
  if (a->raw) a->raw[id] += count;
  a->tokens += count;
}

static void add_token(void *ctx, int32_t id) { add_count(ctx, id, 1); }

/* One input (counts or text) into a. */
static enum mtpq_status read_input(struct mtpq_tokenizer *t, const char *path, const char *field,
                                   struct acc *a, int *is_text, struct mtpq_err *err) {
  *is_text = !mtpq_is_counts_path(path);
  if (!*is_text) return mtpq_counts_read(path, mtpq_tokenizer_vocab_size(t), add_count, a, err);
  struct mtpq_text_stats ts = {0};
  return mtpq_text_tokenize(t, path, field, add_token, a, &ts, err);
}

static int exactly_one_codepoint(const unsigned char *b, size_t n) {
  if (n == 0) return 0;
  uint32_t cp;
  size_t k = mtpq__utf8_decode(b, n, &cp);
  return k == n && !(cp == 0xFFFD && !(n == 3 && b[0] == 0xEF && b[1] == 0xBF && b[2] == 0xBD));
}

/* Ranking order: (weight desc, id asc). */
struct ranked {
  double w;
  int32_t id;
};
static int cmp_rank(const void *x, const void *y) {
  const struct ranked *a = x, *b = y;
  if (a->w != b->w) return a->w > b->w ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

static char *with_suffix(const char *prefix, const char *suf) {
  size_t n = strlen(prefix) + strlen(suf) + 1;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s%s", prefix, suf);
  return p;
}

static enum mtpq_status write_ids_safetensors(const char *path, const int64_t *ids, size_t n,
                                              const struct mtpq_tokenizer *t, struct mtpq_err *err) {
  struct mtpq_st_writer *w = NULL;
  int64_t shape[1] = {(int64_t)n};
  char fp[17], vs[24];
  mtpq_tokenizer_fingerprint(t, fp);
  snprintf(vs, sizeof vs, "%d", (int)mtpq_tokenizer_vocab_size(t));
  enum mtpq_status st = mtpq_stw_init(path, &w, err);
  if (!st) st = mtpq_stw_metadata(w, "format", "pt", err);
  /* the tokenizer the ids belong to: quantize refuses a target whose tokenizer differs */
  if (!st) st = mtpq_stw_metadata(w, "tokenizer_fingerprint", fp, err);
  if (!st) st = mtpq_stw_metadata(w, "tokenizer_vocab_size", vs, err);
  if (!st) st = mtpq_stw_metadata(w, "content", "mtpq draft vocabulary: selected token ids, ascending", err);
  if (!st) st = mtpq_stw_add(w, "ids", MTPQ_DTYPE_I64, 1, shape, err);
  if (!st) st = mtpq_stw_begin(w, err);
  if (!st) st = mtpq_stw_write_all(w, "ids", ids, n * 8, err);
  if (!st) st = mtpq_stw_commit(w, err);
  mtpq_stw_free(w);
  return st;
}

enum mtpq_status mtpq_vocab_build(const struct mtpq_vocab_params *p, struct mtpq_vocab_summary *s,
                                  struct mtpq_err *err) {
  memset(s, 0, sizeof *s);
  struct mtpq_tokenizer *t = NULL;
  enum mtpq_status st = mtpq_tokenizer_load(p->tokenizer, &t, err);
  if (st) return st;
  int32_t V = mtpq_tokenizer_vocab_size(t);
  s->vocab_size = V;
  s->size = p->size;
  double *w = calloc((size_t)V, sizeof *w);
  uint8_t *cls = calloc((size_t)V, 1);
  int32_t *order = malloc((size_t)V * sizeof *order);
  int64_t *ids = malloc((size_t)(p->size > 0 ? p->size : 1) * sizeof *ids);
  uint64_t *held = calloc((size_t)V, sizeof *held);
  double *cum = malloc(((size_t)V + 1) * sizeof *cum);
  cJSON *rep = cJSON_CreateObject(), *inputs = NULL;
  char *paths[3] = {NULL, NULL, NULL};
  if (!w || !cls || !order || !ids || !held || !cum || !rep) {
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    goto out;
  }
  /* 1. corpus */
  mtpq__jb_reset(); /* (the report is built through checked adds: io/json.h) */
  cJSON *corpus = mtpq__jb(cJSON_CreateObject());
  if (corpus && !cJSON_AddItemToObject(rep, "corpus_tmp", corpus)) { /* (owned by rep until step 5) */
    cJSON_Delete(corpus);
    corpus = NULL;
    mtpq__jb_ok(0);
  }
  inputs = mtpq__jb(cJSON_AddArrayToObject(corpus, "inputs"));
  double weighted = 0;
  for (size_t k = 0; k < p->n_counts + p->n_texts && !st; k++) {
    const struct mtpq_vocab_input *in = k < p->n_counts ? &p->counts[k] : &p->texts[k - p->n_counts];
    struct acc a = {w, NULL, in->weight, 0};
    int is_text = k >= p->n_counts;
    if (is_text) {
      struct mtpq_text_stats ts = {0};
      st = mtpq_text_tokenize(t, in->path, p->text_field, add_token, &a, &ts, err);
    } else {
      st = mtpq_counts_read(in->path, V, add_count, &a, err);
    }
    if (!st && a.tokens == 0) /* a wrong input must not pass as a corpus: an empty file, a foreign layout */
      st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: no tokens in this %s input; a corpus input must hold some",
                        in->path, is_text ? "text" : "counts");
    if (st) break;
    s->corpus_tokens += a.tokens;
    weighted += (double)a.tokens * in->weight;
    cJSON *x = mtpq__jb(cJSON_CreateObject());
    MTPQ_JB(cJSON_AddStringToObject(x, "path", in->path));
    MTPQ_JB(cJSON_AddStringToObject(x, "kind", is_text ? "text" : "counts"));
    MTPQ_JB(cJSON_AddNumberToObject(x, "weight", in->weight));
    MTPQ_JB(cJSON_AddNumberToObject(x, "tokens", (double)a.tokens));
    mtpq__jb_add(inputs, NULL, x);
  }
  if (st) goto out;
  /* 2. forced classes */
  int32_t universe = 0;
  for (int32_t id = 0; id < V; id++) {
    size_t bl;
    const unsigned char *b = mtpq_tokenizer_bytes(t, id, &bl);
    if (!b) continue;
    universe++;
    if (mtpq_tokenizer_is_added(t, id)) cls[id] = CLS_ADDED, s->forced_added++;
    else if (mtpq_tokenizer_vocab_chars(t, id) == 1) cls[id] = CLS_SINGLE_CHAR, s->forced_single_char++;
    else if (exactly_one_codepoint(b, bl)) cls[id] = CLS_SINGLE_UNICODE, s->forced_single_unicode++;
  }
  s->forced_total = s->forced_added + s->forced_single_char + s->forced_single_unicode;
  if (p->size < (int64_t)s->forced_total || p->size > universe) {
    st = mtpq_err_set(err, MTPQ_E_INVAL,
                      "--size %lld is outside [%zu, %d]: the forced set has %zu ids (added %zu, "
                      "single-character strings %zu, single code points %zu) and the vocabulary %d",
                      (long long)p->size, s->forced_total, universe, s->forced_total, s->forced_added,
                      s->forced_single_char, s->forced_single_unicode, universe);
    goto out;
  }
  /* 3. ranking: forced ids first (ascending), then the rest by weight */
  size_t nf = 0, nr = 0;
  for (int32_t id = 0; id < V; id++) {
    size_t bl;
    if (!mtpq_tokenizer_bytes(t, id, &bl)) continue;
    if (cls[id]) order[nf++] = id;
  }
  for (int32_t id = 0; id < V; id++) {
    size_t bl;
    if (mtpq_tokenizer_bytes(t, id, &bl) && !cls[id]) order[nf + nr++] = id;
  }
  struct ranked *rk = malloc((nr ? nr : 1) * sizeof *rk);
  if (!rk) {
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < nr; i++) rk[i] = (struct ranked){w[order[nf + i]], order[nf + i]};
  qsort(rk, nr, sizeof *rk, cmp_rank);
  for (size_t i = 0; i < nr; i++) order[nf + i] = rk[i].id;
  free(rk);
  for (int64_t i = 0; i < p->size; i++) ids[i] = order[i];
  qsort(ids, (size_t)p->size, sizeof *ids, cmp_i64);
  /* 4. held-out coverage along the ranking */
  cJSON *hj = mtpq__jb(cJSON_CreateObject());
  for (size_t h = 0; h < p->n_heldout && !st; h++) {
    memset(held, 0, (size_t)V * sizeof *held);
    double *wh = calloc((size_t)V, sizeof *wh);
    if (!wh) {
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      break;
    }
    struct acc a = {wh, held, 1.0, 0};
    int is_text;
    st = read_input(t, p->heldout[h].path, p->text_field, &a, &is_text, err);
    free(wh);
    if (st) break;
    cum[0] = 0;
    for (int32_t i = 0; i < universe; i++) cum[i + 1] = cum[i] + (double)held[order[i]];
    double total = (double)a.tokens;
    cJSON *x = mtpq__jb(cJSON_CreateObject());
    MTPQ_JB(cJSON_AddStringToObject(x, "path", p->heldout[h].path));
    MTPQ_JB(cJSON_AddNumberToObject(x, "tokens", total));
    MTPQ_JB(cJSON_AddNumberToObject(x, "coverage", total > 0 ? cum[p->size] / total : 0.0));
    cJSON *at = mtpq__jb(cJSON_AddObjectToObject(x, "coverage_at"));
    for (int k = 0; k < N_COMPARE; k++) {
      char key[16];
      snprintf(key, sizeof key, "%lld", (long long)COMPARE_SIZES[k]);
      if (COMPARE_SIZES[k] < (int64_t)s->forced_total || COMPARE_SIZES[k] > universe || total <= 0)
        MTPQ_JB(cJSON_AddNullToObject(at, key));
      else
        MTPQ_JB(cJSON_AddNumberToObject(at, key, cum[COMPARE_SIZES[k]] / total));
    }
    mtpq__jb_add(hj, p->heldout[h].name, x);
  }
  if (st) {
    cJSON_Delete(hj);
    goto out;
  }
  /* 5. report */
  cJSON_DetachItemFromObject(rep, "corpus_tmp");
  MTPQ_JB(cJSON_AddNumberToObject(rep, "size", (double)p->size));
  MTPQ_JB(cJSON_AddStringToObject(rep, "tokenizer", p->tokenizer));
  MTPQ_JB(cJSON_AddNumberToObject(rep, "vocab_size", universe));
  cJSON *fj = mtpq__jb(cJSON_AddObjectToObject(rep, "forced"));
  MTPQ_JB(cJSON_AddNumberToObject(fj, "added", (double)s->forced_added));
  MTPQ_JB(cJSON_AddNumberToObject(fj, "single_char_strings", (double)s->forced_single_char));
  MTPQ_JB(cJSON_AddNumberToObject(fj, "single_unicode_char", (double)s->forced_single_unicode));
  MTPQ_JB(cJSON_AddNumberToObject(fj, "total", (double)s->forced_total));
  MTPQ_JB(cJSON_AddNumberToObject(corpus, "tokens", (double)s->corpus_tokens));
  MTPQ_JB(cJSON_AddNumberToObject(corpus, "weighted_tokens", weighted));
  mtpq__jb_add(rep, "corpus", corpus);
  mtpq__jb_add(rep, "heldout", hj);
  s->report_json = mtpq__jb_failed() ? NULL : cJSON_Print(rep);
  if (!s->report_json) {
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    goto out;
  }
  /* 6. outputs, all or nothing */
  paths[0] = with_suffix(p->out_prefix, ".safetensors");
  paths[1] = with_suffix(p->out_prefix, ".pt");
  paths[2] = with_suffix(p->out_prefix, ".json");
  if (!paths[0] || !paths[1] || !paths[2]) {
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    goto out;
  }
  st = write_ids_safetensors(paths[0], ids, (size_t)p->size, t, err);
  if (!st) st = mtpq_pt_write_i64(paths[1], ids, (size_t)p->size, err);
  if (!st) st = mtpq__write_file_atomic(paths[2], s->report_json, strlen(s->report_json), err);
  if (st) {
    unlink(paths[0]);
    unlink(paths[1]);
  }
out:
  if (st) {
    free(s->report_json);
    s->report_json = NULL;
  }
  for (int i = 0; i < 3; i++) free(paths[i]);
  cJSON_Delete(rep);
  free(w);
  free(cls);
  free(order);
  free(ids);
  free(held);
  free(cum);
  mtpq_tokenizer_free(t);
  return st;
}
