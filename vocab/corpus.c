/* Count files and text corpora; see vocab/corpus.h. */
#include "io/json.h"
#include "vocab/corpus.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/reader.h"

static int has_suffix(const char *s, const char *suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n >= m && strcmp(s + n - m, suf) == 0;
}

int mtpq_is_counts_path(const char *path) {
  return has_suffix(path, ".tsv") || has_suffix(path, ".tsv.zst");
}

/* Decimal digits only, no sign, no overflow. */
static int parse_u64(const char *s, size_t n, uint64_t *out) {
  if (n == 0 || n > 19) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  *out = v;
  return 0;
}

enum mtpq_status mtpq_counts_read(const char *path, int32_t vocab, mtpq_count_fn fn, void *ctx,
                                  struct mtpq_err *err) {
  struct mtpq_reader *r = NULL;
  enum mtpq_status st = mtpq_reader_open(path, &r, err);
  while (!st) {
    const char *line;
    size_t len;
    st = mtpq_reader_line(r, &line, &len, err);
    if (st || len == (size_t)-1) break;
    if (len && line[len - 1] == '\r') len--;
    if (len == 0) continue;
    const char *tab = memchr(line, '\t', len);
    uint64_t id, count;
    if (!tab || parse_u64(line, (size_t)(tab - line), &id) ||
        parse_u64(tab + 1, len - (size_t)(tab - line) - 1, &count)) {
      st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s:%zu: expected \"token_id<TAB>count\", got \"%.*s\"",
                        path, mtpq_reader_lineno(r), (int)(len > 60 ? 60 : len), line);
      break;
    }
    if (id >= (uint64_t)vocab) {
      st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s:%zu: token id %llu is beyond the vocabulary (%d ids)",
                        path, mtpq_reader_lineno(r), (unsigned long long)id, vocab);
      break;
    }
    fn(ctx, (int32_t)id, count);
  }
  mtpq_reader_close(r);
  return st;
}

static enum mtpq_status text_plain(struct mtpq_tokenizer *t, struct mtpq_reader *r, const char *path,
                                   mtpq_token_fn emit, void *ctx, struct mtpq_text_stats *stats,
                                   struct mtpq_err *err) {
  size_t cap = (size_t)4 << 20, len = 0;
  const size_t maxcap = (size_t)256 << 20;
  char *buf = malloc(cap);
  if (!buf) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  enum mtpq_status st = MTPQ_OK;
  for (;;) {
    if (len == cap) {
      /* no cut point in the whole buffer: grow it (bounded) */
      if (cap >= maxcap) {
        st = mtpq_err_set(err, MTPQ_E_BAD_VALUE,
                          "%s: %zu bytes without a line break before a letter or digit; split the text",
                          path, cap);
        break;
      }
      char *nb = realloc(buf, 2 * cap);
      if (!nb) {
        st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
        break;
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = 0;
    st = mtpq_reader_read(r, buf + len, cap - len, &got, err);
    if (st) break;
    stats->bytes += got;
    len += got;
    if (got == 0) { /* end: the rest is the last piece */
      st = mtpq_tokenizer_encode(t, buf, len, emit, ctx, err);
      break;
    }
    size_t cut = mtpq_tokenizer_safe_cut(t, buf, len);
    if (cut) {
      st = mtpq_tokenizer_encode(t, buf, cut, emit, ctx, err);
      if (st) break;
      memmove(buf, buf + cut, len - cut);
      len -= cut;
    }
  }
  if (!st) stats->documents++;
  free(buf);
  return st;
}

/* a chat line's contents ("messages": [{"role", "content"}, ...]), each tokenized */
static enum mtpq_status chat_contents(struct mtpq_tokenizer *t, const cJSON *msgs, mtpq_token_fn emit, void *ctx,
                                      struct mtpq_err *err) {
  enum mtpq_status st = MTPQ_OK;
  const cJSON *m;
  cJSON_ArrayForEach(m, msgs) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!st && cJSON_IsString(c)) st = mtpq_tokenizer_encode(t, c->valuestring, strlen(c->valuestring), emit, ctx, err);
  }
  return st;
}

static enum mtpq_status text_jsonl(struct mtpq_tokenizer *t, struct mtpq_reader *r, const char *path,
                                   const char *field, mtpq_token_fn emit, void *ctx,
                                   struct mtpq_text_stats *stats, struct mtpq_err *err) {
  enum mtpq_status st = MTPQ_OK;
  char seen[200] = ""; /* the first line without the field: its keys, for the error */
  while (!st) {
    const char *line;
    size_t len;
    st = mtpq_reader_line(r, &line, &len, err);
    if (st || len == (size_t)-1) break;
    stats->bytes += len + 1;
    if (len == 0) continue;
    char where[512];
    snprintf(where, sizeof where, "%s:%zu", path, mtpq_reader_lineno(r));
    cJSON *o = mtpq__json_parse(line, len, where, MTPQ_E_BAD_VALUE, err);
    if (!o) {
      st = MTPQ_E_BAD_VALUE;
      break;
    }
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, field);
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if (cJSON_IsString(f)) {
      st = mtpq_tokenizer_encode(t, f->valuestring, strlen(f->valuestring), emit, ctx, err);
      stats->documents++;
    } else if (!f && cJSON_IsArray(msgs)) { /* chat JSONL: the messages' contents */
      st = chat_contents(t, msgs, emit, ctx, err);
      stats->documents++;
    } else {
      if (!stats->skipped_lines && cJSON_IsObject(o)) {
        size_t n = 0;
        const cJSON *k;
        cJSON_ArrayForEach(k, o) {
          if (n + strlen(k->string) + 4 >= sizeof seen) break;
          n += (size_t)snprintf(seen + n, sizeof seen - n, "%s\"%s\"", n ? ", " : "", k->string);
        }
      }
      stats->skipped_lines++;
    }
    cJSON_Delete(o);
  }
  if (!st && stats->documents == 0 && stats->skipped_lines > 0)
    st = mtpq_err_set(err, MTPQ_E_BAD_VALUE,
                      "%s: no line has a string field \"%s\" (nor a \"messages\" chat); the first line has %s; "
                      "pass --text-field NAME",
                      path, field, seen[0] ? seen : "no fields");
  return st;
}

enum mtpq_status mtpq_text_tokenize(struct mtpq_tokenizer *t, const char *path, const char *field,
                                    mtpq_token_fn emit, void *ctx, struct mtpq_text_stats *stats,
                                    struct mtpq_err *err) {
  struct mtpq_reader *r = NULL;
  enum mtpq_status st = mtpq_reader_open(path, &r, err);
  if (st) return st;
  if (has_suffix(path, ".jsonl") || has_suffix(path, ".jsonl.zst"))
    st = text_jsonl(t, r, path, field ? field : "text", emit, ctx, stats, err);
  else
    st = text_plain(t, r, path, emit, ctx, stats, err);
  mtpq_reader_close(r);
  return st;
}
