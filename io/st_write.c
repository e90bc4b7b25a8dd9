/* safetensors writer: declare, begin, write pieces, commit (see safetensors.h).
 * Determinism: the same declarations and bytes give the same file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "io/util.h"

struct wtensor {
  char *name;
  enum mtpq_dtype dtype;
  int rank;
  int64_t shape[MTPQ_ST_MAX_RANK];
  uint64_t nbytes;
  uint64_t begin; /* relative to the data section */
  uint64_t written;
};

struct mtpq_st_writer {
  char *path;
  char *tmp;
  int fd;
  int begun;
  int committed;
  size_t n, cap;
  struct wtensor *t; /* sorted by name after begin */
  size_t n_meta;
  char **meta; /* key, value pairs */
  uint64_t data_start;
};

/* The header is built in an mtpq__buf (io/util.h). */
static void sb_str(struct mtpq__buf *b, const char *s) { mtpq__buf_put(b, s, strlen(s)); }

static void sb_jstr(struct mtpq__buf *b, const char *s) {
  mtpq__buf_put(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char esc[8];
    if (*p == '"' || *p == '\\') {
      esc[0] = '\\';
      esc[1] = (char)*p;
      mtpq__buf_put(b, esc, 2);
    } else if (*p < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", *p);
      mtpq__buf_put(b, esc, 6);
    } else {
      mtpq__buf_put(b, (const char *)p, 1);
    }
  }
  mtpq__buf_put(b, "\"", 1);
}

static void sb_u64(struct mtpq__buf *b, uint64_t v) {
  char tmp[24];
  snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
  sb_str(b, tmp);
}

enum mtpq_status mtpq_stw_init(const char *path, struct mtpq_st_writer **out,
                               struct mtpq_err *err) {
  struct mtpq_st_writer *w = calloc(1, sizeof *w);
  *out = NULL;
  if (!w) return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", path);
  w->fd = -1;
  w->path = mtpq__strdup(path);
  w->tmp = mtpq__tmp_name(path);
  if (!w->path || !w->tmp) {
    mtpq_stw_free(w);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", path);
  }
  *out = w;
  return MTPQ_OK;
}

enum mtpq_status mtpq_stw_metadata(struct mtpq_st_writer *w, const char *key,
                                   const char *value, struct mtpq_err *err) {
  if (w->begun)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%s: metadata added after begin", w->path);
  for (size_t i = 0; i < w->n_meta; i++)
    if (strcmp(w->meta[2 * i], key) == 0)
      return mtpq_err_set(err, MTPQ_E_INVAL, "%s: metadata key %s set twice", w->path, key);
  char **nm = realloc(w->meta, (2 * w->n_meta + 2) * sizeof *nm);
  if (!nm) return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", w->path);
  w->meta = nm;
  nm[2 * w->n_meta] = mtpq__strdup(key);
  nm[2 * w->n_meta + 1] = mtpq__strdup(value);
  w->n_meta++;
  if (!nm[2 * w->n_meta - 2] || !nm[2 * w->n_meta - 1])
    return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", w->path);
  return MTPQ_OK;
}

enum mtpq_status mtpq_stw_add(struct mtpq_st_writer *w, const char *name,
                              enum mtpq_dtype dtype, int rank, const int64_t *shape,
                              struct mtpq_err *err) {
  size_t nl = strlen(name);
  if (w->begun) return mtpq_err_set(err, MTPQ_E_INVAL, "%s: tensor %s added after begin", w->path, name);
  if (nl == 0 || nl > MTPQ_ST_MAX_NAME || strcmp(name, "__metadata__") == 0)
    return mtpq_err_set(err, MTPQ_E_ST_NAME, "%s: invalid tensor name \"%.60s\"", w->path, name);
  if (mtpq_dtype_size(dtype) == 0)
    return mtpq_err_set(err, MTPQ_E_ST_DTYPE, "%s: tensor %s: invalid dtype %d", w->path, name,
                        (int)dtype);
  if (rank < 0 || rank > MTPQ_ST_MAX_RANK)
    return mtpq_err_set(err, MTPQ_E_ST_RANK, "%s: tensor %s: rank %d", w->path, name, rank);
  uint64_t numel = 1;
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0)
      return mtpq_err_set(err, MTPQ_E_ST_SHAPE_NEGATIVE, "%s: tensor %s: dimension %d is %lld",
                          w->path, name, i, (long long)shape[i]);
    uint64_t d = (uint64_t)shape[i];
    if (d && numel > (UINT64_MAX >> 4) / d)
      return mtpq_err_set(err, MTPQ_E_ST_OVERFLOW, "%s: tensor %s: size overflows", w->path, name);
    numel *= d;
  }
  for (size_t i = 0; i < w->n; i++)
    if (strcmp(w->t[i].name, name) == 0)
      return mtpq_err_set(err, MTPQ_E_ST_DUPLICATE, "%s: tensor %s declared twice", w->path, name);
  if (w->n == w->cap) {
    size_t nc = w->cap ? 2 * w->cap : 64;
    struct wtensor *nt = realloc(w->t, nc * sizeof *nt);
    if (!nt) return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", w->path);
    w->t = nt;
    w->cap = nc;
  }
  struct wtensor *t = &w->t[w->n];
  memset(t, 0, sizeof *t);
  t->name = mtpq__strdup(name);
  if (!t->name) return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", w->path);
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
  t->nbytes = numel * mtpq_dtype_size(dtype);
  w->n++;
  return MTPQ_OK;
}

static int cmp_wname(const void *a, const void *b) {
  return strcmp(((const struct wtensor *)a)->name, ((const struct wtensor *)b)->name);
}

/* Data order: larger elements first, so every tensor is naturally aligned
 * (the header is padded to 8 bytes), then by name. */
static int cmp_wdata(const void *a, const void *b) {
  const struct wtensor *x = *(const struct wtensor *const *)a;
  const struct wtensor *y = *(const struct wtensor *const *)b;
  size_t sx = mtpq_dtype_size(x->dtype), sy = mtpq_dtype_size(y->dtype);
  if (sx != sy) return sx > sy ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int cmp_meta(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static enum mtpq_status build_header(struct mtpq_st_writer *w, struct mtpq__buf *b,
                                     struct mtpq_err *err) {
  if (w->n) qsort(w->t, w->n, sizeof *w->t, cmp_wname);
  struct wtensor **ord = malloc((w->n ? w->n : 1) * sizeof *ord);
  if (!ord) return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", w->path);
  for (size_t i = 0; i < w->n; i++) ord[i] = &w->t[i];
  qsort(ord, w->n, sizeof *ord, cmp_wdata);
  uint64_t pos = 0;
  for (size_t i = 0; i < w->n; i++) {
    ord[i]->begin = pos;
    pos += ord[i]->nbytes;
  }
  free(ord);
  /* Pairs are sorted as units: keys are unique, so comparing the key of each
   * 2-pointer record orders the pairs. */
  if (w->n_meta) qsort(w->meta, w->n_meta, 2 * sizeof *w->meta, cmp_meta);

  mtpq__buf_put(b, "{", 1);
  int first = 1;
  if (w->n_meta) {
    sb_str(b, "\"__metadata__\":{");
    for (size_t i = 0; i < w->n_meta; i++) {
      if (i) mtpq__buf_put(b, ",", 1);
      sb_jstr(b, w->meta[2 * i]);
      mtpq__buf_put(b, ":", 1);
      sb_jstr(b, w->meta[2 * i + 1]);
    }
    mtpq__buf_put(b, "}", 1);
    first = 0;
  }
  for (size_t i = 0; i < w->n; i++) {
    const struct wtensor *t = &w->t[i];
    if (!first) mtpq__buf_put(b, ",", 1);
    first = 0;
    sb_jstr(b, t->name);
    sb_str(b, ":{\"dtype\":\"");
    sb_str(b, mtpq_dtype_name(t->dtype));
    sb_str(b, "\",\"shape\":[");
    for (int d = 0; d < t->rank; d++) {
      if (d) mtpq__buf_put(b, ",", 1);
      sb_u64(b, (uint64_t)t->shape[d]);
    }
    sb_str(b, "],\"data_offsets\":[");
    sb_u64(b, t->begin);
    mtpq__buf_put(b, ",", 1);
    sb_u64(b, t->begin + t->nbytes);
    sb_str(b, "]}");
  }
  mtpq__buf_put(b, "}", 1);
  while (!b->oom && b->n % 8) mtpq__buf_put(b, " ", 1); /* (an out-of-memory buffer no longer grows) */
  if (b->oom) return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", w->path);
  return MTPQ_OK;
}

static enum mtpq_status pwrite_all(int fd, const void *p, uint64_t n, uint64_t off,
                                   const char *path, struct mtpq_err *err) {
  const char *c = p;
  while (n) {
    size_t chunk = n > ((uint64_t)1 << 30) ? ((size_t)1 << 30) : (size_t)n;
    ssize_t r = pwrite(fd, c, chunk, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: write of %zu bytes at %llu failed: %s",
                          path, chunk, (unsigned long long)off, strerror(errno));
    c += r;
    off += (uint64_t)r;
    n -= (uint64_t)r;
  }
  return MTPQ_OK;
}

enum mtpq_status mtpq_stw_begin(struct mtpq_st_writer *w, struct mtpq_err *err) {
  if (w->begun) return mtpq_err_set(err, MTPQ_E_INVAL, "%s: begin called twice", w->path);
  struct mtpq__buf b = {0};
  enum mtpq_status st = build_header(w, &b, err);
  if (st) {
    free(b.p);
    return st;
  }
  w->fd = open(w->tmp, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (w->fd < 0) {
    free(b.p);
    return mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: cannot create: %s", w->tmp, strerror(errno));
  }
  w->begun = 1;
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)b.n >> (8 * i));
  st = pwrite_all(w->fd, len8, 8, 0, w->tmp, err);
  if (!st) st = pwrite_all(w->fd, b.p, b.n, 8, w->tmp, err);
  w->data_start = 8 + b.n;
  free(b.p);
  uint64_t total = w->data_start;
  for (size_t i = 0; i < w->n; i++) total += w->t[i].nbytes;
  if (!st && ftruncate(w->fd, (off_t)total) != 0)
    st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: cannot size to %llu bytes: %s", w->tmp,
                      (unsigned long long)total, strerror(errno));
  return st;
}

enum mtpq_status mtpq_stw_write(struct mtpq_st_writer *w, const char *name, uint64_t at,
                                const void *bytes, uint64_t n, struct mtpq_err *err) {
  if (!w->begun || w->committed)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%s: write outside begin/commit", w->path);
  struct wtensor key = {.name = (char *)name};
  struct wtensor *t = w->n ? bsearch(&key, w->t, w->n, sizeof *w->t, cmp_wname) : NULL;
  if (!t) return mtpq_err_set(err, MTPQ_E_INVAL, "%s: tensor %s was not declared", w->path, name);
  if (at > t->nbytes || n > t->nbytes - at)
    return mtpq_err_set(err, MTPQ_E_INVAL,
                        "%s: tensor %s: write of %llu bytes at %llu exceeds its %llu bytes",
                        w->path, name, (unsigned long long)n, (unsigned long long)at,
                        (unsigned long long)t->nbytes);
  enum mtpq_status st = pwrite_all(w->fd, bytes, n, w->data_start + t->begin + at, w->tmp, err);
  if (!st) t->written += n;
  return st;
}

enum mtpq_status mtpq_stw_commit(struct mtpq_st_writer *w, struct mtpq_err *err) {
  if (!w->begun) {
    enum mtpq_status st = mtpq_stw_begin(w, err);
    if (st) return st;
  }
  for (size_t i = 0; i < w->n; i++)
    if (w->t[i].written != w->t[i].nbytes)
      return mtpq_err_set(err, MTPQ_E_INVAL, "%s: tensor %s: %llu of %llu bytes written",
                          w->path, w->t[i].name, (unsigned long long)w->t[i].written,
                          (unsigned long long)w->t[i].nbytes);
  if (fsync(w->fd) != 0)
    return mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: fsync failed: %s", w->tmp, strerror(errno));
  int rc = close(w->fd);
  w->fd = -1;
  if (rc != 0)
    return mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: close failed: %s", w->tmp, strerror(errno));
  if (rename(w->tmp, w->path) != 0)
    return mtpq_err_set(err, MTPQ_E_IO_RENAME, "%s: cannot rename to %s: %s", w->tmp, w->path,
                        strerror(errno));
  w->committed = 1;
  return MTPQ_OK;
}

void mtpq_stw_free(struct mtpq_st_writer *w) {
  if (!w) return;
  if (w->fd >= 0) close(w->fd);
  if (w->begun && !w->committed && w->tmp) unlink(w->tmp);
  for (size_t i = 0; i < w->n; i++) free(w->t[i].name);
  free(w->t);
  for (size_t i = 0; i < 2 * w->n_meta; i++) free(w->meta[i]);
  free(w->meta);
  free(w->path);
  free(w->tmp);
  free(w);
}
