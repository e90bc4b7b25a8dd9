/* Recorded greedy target traces; see kernels/traces.h. */
#include "kernels/traces.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

struct mtpq_traces {
  struct mtpq_st_file *f;
  size_t n;
  struct mtpq_trace *v;
  char *names; /* the names, NUL-separated */
  int32_t **own; /* [n]: a trace's tokens copied where the file leaves them misaligned for int32_t, else NULL */
};

void mtpq_traces_close(struct mtpq_traces *t) {
  if (!t) return;
  mtpq_st_close(t->f);
  for (size_t i = 0; t->own && i < t->n; i++) free(t->own[i]);
  free(t->own);
  free(t->v);
  free(t->names);
  free(t);
}

static int is_tokens(const char *name, size_t *stem) {
  size_t nl = strlen(name);
  if (nl < 8 || strcmp(name + nl - 7, ".tokens") != 0) return 0;
  *stem = nl - 7;
  return 1;
}

enum mtpq_status mtpq_traces_open(const char *path, struct mtpq_traces **out, struct mtpq_err *err) {
  *out = NULL;
  struct mtpq_traces *t = calloc(1, sizeof *t);
  if (!t) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  enum mtpq_status st = mtpq_st_open(path, &t->f, err);
  size_t cnt = st ? 0 : mtpq_st_count(t->f), stem, bytes = 0, k = 0;
  for (size_t i = 0; i < cnt; i++)
    if (is_tokens(mtpq_st_at(t->f, i)->name, &stem)) t->n++, bytes += stem + 1;
  if (!st && t->n == 0)
    st = mtpq_err_set(err, MTPQ_E_NOT_FOUND, "%s: no traces (no NAME.tokens tensor among its %zu tensors)", path,
                      cnt);
  if (!st &&
      (!(t->v = calloc(t->n, sizeof *t->v)) || !(t->names = malloc(bytes)) || !(t->own = calloc(t->n, sizeof *t->own))))
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  char *np = t->names;
  for (size_t i = 0; i < cnt && !st; i++) {
    const struct mtpq_tensor *tt = mtpq_st_at(t->f, i);
    if (!is_tokens(tt->name, &stem)) continue;
    char hname[600];
    snprintf(hname, sizeof hname, "%.*s.hidden", (int)stem, tt->name);
    const struct mtpq_tensor *hh = mtpq_st_find(t->f, hname);
    if (tt->dtype != MTPQ_DTYPE_I32 || tt->rank != 1 || !hh || hh->dtype != MTPQ_DTYPE_BF16 || hh->rank != 2 ||
        hh->shape[0] != tt->shape[0]) {
      st = mtpq_err_set(err, MTPQ_E_DTYPE_MISMATCH, "%s: trace %.*s needs I32 %s [N] and BF16 %s [N, H]%s", path,
                        (int)stem, tt->name, tt->name, hname, hh ? "" : " (no such tensor)");
      break;
    }
    if (k > 0 && hh->shape[1] != t->v[0].hidden) {
      st = mtpq_err_set(err, MTPQ_E_DTYPE_MISMATCH, "%s: %s has hidden size %lld, %s.hidden %lld", path, hname,
                        (long long)hh->shape[1], t->v[0].name, (long long)t->v[0].hidden);
      break;
    }
    struct mtpq_trace *x = &t->v[k];
    int32_t **own = &t->own[k++];
    /* safetensors places a tensor at any byte offset: tokens the mapping leaves misaligned are read from a copy */
    if ((uintptr_t)tt->data % _Alignof(int32_t)) {
      if (!(*own = malloc(tt->shape[0] ? (size_t)tt->shape[0] * sizeof(int32_t) : 1))) {
        st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
        break;
      }
      memcpy(*own, tt->data, (size_t)tt->shape[0] * sizeof(int32_t));
    }
    memcpy(np, tt->name, stem), np[stem] = 0;
    x->name = np, np += stem + 1;
    snprintf(x->domain, sizeof x->domain, "%.*s", (int)strcspn(x->name, "."), x->name);
    x->tokens = *own ? *own : tt->data, x->hidden_bf16 = hh->data, x->n = tt->shape[0], x->hidden = hh->shape[1];
    char key[600];
    snprintf(key, sizeof key, "prompt_len.%s", x->name);
    const char *pl = mtpq_st_metadata_get(t->f, key);
    if (pl) {
      char *end = NULL;
      long long v = strtoll(pl, &end, 10);
      if (end == pl || *end || v < 1 || v >= x->n) {
        st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: metadata %s = \"%s\" is not a length in 1..%lld", path, key, pl,
                          (long long)(x->n - 1));
        break;
      }
      x->prompt_len = v;
    }
  }
  if (st) {
    mtpq_traces_close(t);
    return st;
  }
  *out = t;
  return MTPQ_OK;
}

size_t mtpq_traces_count(const struct mtpq_traces *t) { return t->n; }
const struct mtpq_trace *mtpq_traces_at(const struct mtpq_traces *t, size_t i) { return i < t->n ? &t->v[i] : NULL; }
const char *mtpq_traces_path(const struct mtpq_traces *t) { return mtpq_st_path(t->f); }

enum mtpq_status mtpq_traces_meta_int(const struct mtpq_traces *t, const char *key, int64_t lo, int64_t hi,
                                      int64_t dflt, int64_t *out, struct mtpq_err *err) {
  const char *v = mtpq_st_metadata_get(t->f, key);
  *out = dflt;
  if (!v) return MTPQ_OK;
  char *end = NULL;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: metadata %s = \"%s\" is not an integer in %lld..%lld",
                        mtpq_traces_path(t), key, v, (long long)lo, (long long)hi);
  *out = x;
  return MTPQ_OK;
}

enum mtpq_status mtpq_traces_check(const struct mtpq_traces *t, int64_t hidden, int64_t vocab,
                                   struct mtpq_err *err) {
  for (size_t i = 0; i < t->n; i++) {
    const struct mtpq_trace *x = &t->v[i];
    if (x->hidden != hidden)
      return mtpq_err_set(err, MTPQ_E_DTYPE_MISMATCH, "%s: %s.hidden has hidden size %lld but the drafter's is %lld",
                          mtpq_traces_path(t), x->name, (long long)x->hidden, (long long)hidden);
    for (int64_t p = 0; p < x->n; p++) {
      const int32_t v = x->tokens[p];
      if (v < 0 || v >= vocab)
        return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: %s.tokens[%lld] = %d is outside the vocabulary (%lld)",
                            mtpq_traces_path(t), x->name, (long long)p, v, (long long)vocab);
    }
  }
  return MTPQ_OK;
}
