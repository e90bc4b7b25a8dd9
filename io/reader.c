/* Plain / zstd stream reader with a line splitter; see io/reader.h. */
#include "io/reader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "io/util.h"

#define LINE_CAP ((size_t)256 << 20)

struct mtpq_reader {
  char *path;
  FILE *fp;
  ZSTD_DStream *z;
  unsigned char *zin;
  size_t zin_cap;
  ZSTD_inBuffer in;
  int z_mid_frame; /* a frame was started and not finished */
  int eof;
  /* line splitter */
  char *buf;
  size_t cap, beg, end;
  size_t lineno;
};

static int has_suffix(const char *s, const char *suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n >= m && strcmp(s + n - m, suf) == 0;
}

enum mtpq_status mtpq_reader_open(const char *path, struct mtpq_reader **out, struct mtpq_err *err) {
  *out = NULL;
  struct mtpq_reader *r = calloc(1, sizeof *r);
  if (!r) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  r->path = mtpq__strdup(path);
  r->fp = fopen(path, "rb");
  if (!r->fp) {
    enum mtpq_status st = mtpq_err_set(err, MTPQ_E_IO_OPEN, "%s: cannot open: %s", path, strerror(errno));
    mtpq_reader_close(r);
    return st;
  }
  if (has_suffix(path, ".zst")) {
    r->z = ZSTD_createDStream();
    r->zin_cap = ZSTD_DStreamInSize();
    r->zin = malloc(r->zin_cap);
    if (!r->z || !r->zin) {
      mtpq_reader_close(r);
      return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    }
    ZSTD_initDStream(r->z);
  }
  *out = r;
  return MTPQ_OK;
}

enum mtpq_status mtpq_reader_read(struct mtpq_reader *r, void *buf, size_t n, size_t *got,
                                  struct mtpq_err *err) {
  *got = 0;
  if (!r->z) {
    size_t k = fread(buf, 1, n, r->fp);
    if (k == 0 && ferror(r->fp))
      return mtpq_err_set(err, MTPQ_E_IO_READ, "%s: read error: %s", r->path, strerror(errno));
    *got = k;
    return MTPQ_OK;
  }
  ZSTD_outBuffer o = {buf, n, 0};
  while (o.pos == 0) {
    if (r->in.pos == r->in.size) {
      if (r->eof) break;
      size_t k = fread(r->zin, 1, r->zin_cap, r->fp);
      if (k == 0) {
        if (ferror(r->fp))
          return mtpq_err_set(err, MTPQ_E_IO_READ, "%s: read error: %s", r->path, strerror(errno));
        r->eof = 1;
        if (r->z_mid_frame)
          return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: corrupt or truncated .zst (its last frame ends early)",
                              r->path);
        break;
      }
      r->in = (ZSTD_inBuffer){r->zin, k, 0};
    }
    size_t rc = ZSTD_decompressStream(r->z, &o, &r->in);
    if (ZSTD_isError(rc))
      return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: corrupt or truncated .zst (zstd says: %s)", r->path,
                          ZSTD_getErrorName(rc));
    r->z_mid_frame = rc != 0;
  }
  *got = o.pos;
  return MTPQ_OK;
}

enum mtpq_status mtpq_reader_line(struct mtpq_reader *r, const char **line, size_t *len,
                                  struct mtpq_err *err) {
  for (;;) {
    char *nl = r->end > r->beg ? memchr(r->buf + r->beg, '\n', r->end - r->beg) : NULL;
    if (nl) {
      *line = r->buf + r->beg;
      *len = (size_t)(nl - (r->buf + r->beg));
      r->beg = (size_t)(nl - r->buf) + 1;
      r->lineno++;
      return MTPQ_OK;
    }
    if (r->beg > 0) { /* compact */
      memmove(r->buf, r->buf + r->beg, r->end - r->beg);
      r->end -= r->beg;
      r->beg = 0;
    }
    if (r->end == r->cap) {
      if (r->cap >= LINE_CAP)
        return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: line %zu is longer than %zu bytes", r->path,
                            r->lineno + 1, LINE_CAP);
      size_t nc = r->cap ? 2 * r->cap : (size_t)1 << 20;
      char *nb = realloc(r->buf, nc);
      if (!nb) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      r->buf = nb;
      r->cap = nc;
    }
    size_t got = 0;
    enum mtpq_status st = mtpq_reader_read(r, r->buf + r->end, r->cap - r->end, &got, err);
    if (st) return st;
    if (got == 0) {
      if (r->end == 0) {
        *len = (size_t)-1;
        return MTPQ_OK;
      }
      *line = r->buf;
      *len = r->end;
      r->beg = r->end = 0;
      r->lineno++;
      return MTPQ_OK;
    }
    r->end += got;
  }
}

size_t mtpq_reader_lineno(const struct mtpq_reader *r) { return r->lineno; }

void mtpq_reader_close(struct mtpq_reader *r) {
  if (!r) return;
  if (r->fp) fclose(r->fp);
  ZSTD_freeDStream(r->z);
  free(r->zin);
  free(r->buf);
  free(r->path);
  free(r);
}
