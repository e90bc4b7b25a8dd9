/* safetensors reader: mmap, header validation, zero-copy tensor views.
 * The layout and the list of checks are in io/safetensors.h. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"
#include "io/safetensors.h"
#include "io/util.h"

struct mtpq_st_file {
  char *path;
  void *map;
  uint64_t map_len;
  uint64_t header_len;
  uint64_t file_size;
  size_t n;
  struct mtpq_tensor *t; /* sorted by name */
  char *names;           /* all tensor names, NUL-separated */
  size_t n_meta;
  char **meta; /* 2*n_meta strings: key, value, key, value ... */
};

static uint64_t load_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* Bound nesting before handing the bytes to a recursive parser. */
/* JSON number -> exact non-negative integer. Returns 0 ok, -1 negative,
 * -2 not an integer / not a number / too large for exact representation. */
static int json_uint(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j)) return -2;
  double v = j->valuedouble;
  if (!isfinite(v)) return -2;
  if (v < 0) return floor(v) == v ? -1 : -2;
  if (v > 9007199254740992.0 || floor(v) != v) return -2;
  *out = (uint64_t)v;
  return 0;
}

static int cmp_tensor_name(const void *a, const void *b) {
  return strcmp(((const struct mtpq_tensor *)a)->name,
                ((const struct mtpq_tensor *)b)->name);
}

static int cmp_by_offset(const void *a, const void *b) {
  const struct mtpq_tensor *x = *(const struct mtpq_tensor *const *)a;
  const struct mtpq_tensor *y = *(const struct mtpq_tensor *const *)b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
  return 0;
}

/* Parse one tensor entry into *t (name already set). begin is relative. */
static enum mtpq_status parse_entry(const cJSON *e, const char *label,
                                    uint64_t data_size, struct mtpq_tensor *t,
                                    struct mtpq_err *err) {
  const char *nm = t->name;
  if (!cJSON_IsObject(e))
    return mtpq_err_set(err, MTPQ_E_ST_ENTRY_NOT_OBJECT,
                        "%s: tensor %s: entry is not a JSON object", label, nm);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  if (!cJSON_IsString(dt))
    return mtpq_err_set(err, MTPQ_E_ST_DTYPE, "%s: tensor %s: dtype missing or not a string",
                        label, nm);
  t->dtype = mtpq_dtype_parse(dt->valuestring, strlen(dt->valuestring));
  if (t->dtype == MTPQ_DTYPE_COUNT)
    return mtpq_err_set(err, MTPQ_E_ST_DTYPE, "%s: tensor %s: unknown dtype \"%.40s\"",
                        label, nm, dt->valuestring);

  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
  if (!cJSON_IsArray(sh))
    return mtpq_err_set(err, MTPQ_E_ST_SHAPE, "%s: tensor %s: shape missing or not an array",
                        label, nm);
  int rank = cJSON_GetArraySize(sh);
  if (rank > MTPQ_ST_MAX_RANK)
    return mtpq_err_set(err, MTPQ_E_ST_RANK, "%s: tensor %s: rank %d exceeds %d", label, nm,
                        rank, MTPQ_ST_MAX_RANK);
  t->rank = rank;
  uint64_t numel = 1;
  int overflow = 0;
  int i = 0;
  for (const cJSON *d = sh->child; d; d = d->next, i++) {
    uint64_t v;
    int rc = json_uint(d, &v);
    if (rc == -1)
      return mtpq_err_set(err, MTPQ_E_ST_SHAPE_NEGATIVE,
                          "%s: tensor %s: dimension %d is negative (%.0f)", label, nm, i,
                          d->valuedouble);
    if (rc)
      return mtpq_err_set(err, MTPQ_E_ST_SHAPE,
                          "%s: tensor %s: dimension %d is not a non-negative integer", label,
                          nm, i);
    t->shape[i] = (int64_t)v;
    if (v != 0 && numel > UINT64_MAX / v) overflow = 1;
    else numel *= v;
  }
  size_t esz = mtpq_dtype_size(t->dtype);
  if (overflow || numel > UINT64_MAX / esz)
    return mtpq_err_set(err, MTPQ_E_ST_OVERFLOW,
                        "%s: tensor %s: element count x %zu bytes overflows 64 bits", label,
                        nm, esz);
  t->numel = numel;
  t->nbytes = numel * esz;

  const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  uint64_t b, en;
  if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || json_uint(of->child, &b) ||
      json_uint(of->child->next, &en))
    return mtpq_err_set(err, MTPQ_E_ST_OFFSETS,
                        "%s: tensor %s: data_offsets must be [begin, end] non-negative integers",
                        label, nm);
  if (b > en)
    return mtpq_err_set(err, MTPQ_E_ST_OFFSETS_ORDER,
                        "%s: tensor %s: data_offsets [%llu, %llu] end before begin", label,
                        nm, (unsigned long long)b, (unsigned long long)en);
  if (en > data_size)
    return mtpq_err_set(err, MTPQ_E_ST_OFFSETS_PAST_DATA,
                        "%s: tensor %s: data_offsets end %llu past data section of %llu bytes",
                        label, nm, (unsigned long long)en, (unsigned long long)data_size);
  if (en - b != t->nbytes)
    return mtpq_err_set(err, MTPQ_E_ST_SIZE_MISMATCH,
                        "%s: tensor %s: data_offsets [%llu, %llu] hold %llu bytes, but %s "
                        "shape needs %llu",
                        label, nm, (unsigned long long)b, (unsigned long long)en,
                        (unsigned long long)(en - b), mtpq_dtype_name(t->dtype),
                        (unsigned long long)t->nbytes);
  t->offset = b; /* made absolute by the caller */
  return MTPQ_OK;
}

static enum mtpq_status parse_metadata(const cJSON *m, const char *label,
                                       struct mtpq_st_file *f, struct mtpq_err *err) {
  if (!cJSON_IsObject(m))
    return mtpq_err_set(err, MTPQ_E_ST_METADATA, "%s: __metadata__ is not an object", label);
  size_t n = (size_t)cJSON_GetArraySize(m);
  f->meta = calloc(2 * n + 1, sizeof(char *));
  if (!f->meta) return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", label);
  for (const cJSON *c = m->child; c; c = c->next) {
    if (!cJSON_IsString(c))
      return mtpq_err_set(err, MTPQ_E_ST_METADATA,
                          "%s: __metadata__ value of \"%.60s\" is not a string", label,
                          c->string);
    const long bk = mtpq__utf8_bad_at(c->string, strlen(c->string)),
               bv = mtpq__utf8_bad_at(c->valuestring, strlen(c->valuestring));
    if (bk >= 0 || bv >= 0)
      return mtpq_err_set(err, MTPQ_E_ST_METADATA, "%s: a __metadata__ %s is not valid UTF-8 (byte %ld)", label,
                          bk >= 0 ? "key" : "value", bk >= 0 ? bk : bv);
    f->meta[2 * f->n_meta] = mtpq__strdup(c->string);
    f->meta[2 * f->n_meta + 1] = mtpq__strdup(c->valuestring);
    f->n_meta++;
    if (!f->meta[2 * f->n_meta - 2] || !f->meta[2 * f->n_meta - 1])
      return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", label);
  }
  return MTPQ_OK;
}

/* Ordering checks: sorted by offset, tensors must tile the data section. */
static enum mtpq_status check_layout(struct mtpq_st_file *f, uint64_t data_size,
                                     const char *label, struct mtpq_err *err) {
  enum mtpq_status st = MTPQ_OK;
  const struct mtpq_tensor **ord = malloc((f->n ? f->n : 1) * sizeof *ord);
  if (!ord) return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", label);
  for (size_t i = 0; i < f->n; i++) ord[i] = &f->t[i];
  qsort(ord, f->n, sizeof *ord, cmp_by_offset);
  uint64_t pos = 0;
  const char *prev = NULL;
  for (size_t k = 0; k < f->n && st == MTPQ_OK; k++) {
    const struct mtpq_tensor *t = ord[k];
    if (t->offset < pos)
      st = mtpq_err_set(err, MTPQ_E_ST_OVERLAP,
                        "%s: tensor %s at bytes [%llu, %llu) overlaps tensor %s ending at %llu",
                        label, t->name, (unsigned long long)t->offset,
                        (unsigned long long)(t->offset + t->nbytes), prev,
                        (unsigned long long)pos);
    else if (t->offset > pos)
      st = mtpq_err_set(err, MTPQ_E_ST_GAP,
                        "%s: %llu unused bytes at data offset %llu before tensor %s", label,
                        (unsigned long long)(t->offset - pos), (unsigned long long)pos,
                        t->name);
    pos = t->offset + t->nbytes;
    prev = t->name;
  }
  if (st == MTPQ_OK && pos != data_size)
    st = mtpq_err_set(err, MTPQ_E_ST_GAP,
                      "%s: data section is %llu bytes but tensors end at %llu", label,
                      (unsigned long long)data_size, (unsigned long long)pos);
  free(ord);
  return st;
}

enum mtpq_status mtpq_st_parse(const void *buf, uint64_t len, uint64_t data_size,
                               const char *label, struct mtpq_st_file **out,
                               struct mtpq_err *err) {
  const unsigned char *p = buf;
  *out = NULL;
  if (len < 8)
    return mtpq_err_set(err, MTPQ_E_ST_TOO_SMALL,
                        "%s: %llu bytes, shorter than the 8-byte header length", label,
                        (unsigned long long)len);
  uint64_t hlen = load_le64(p);
  if (hlen > MTPQ_ST_MAX_HEADER)
    return mtpq_err_set(err, MTPQ_E_ST_HEADER_TOO_LARGE,
                        "%s: header length %llu exceeds the cap of %llu bytes", label,
                        (unsigned long long)hlen, (unsigned long long)MTPQ_ST_MAX_HEADER);
  if (hlen > len - 8)
    return mtpq_err_set(err, MTPQ_E_ST_HEADER_PAST_EOF,
                        "%s: header length %llu exceeds the %llu bytes after the length field",
                        label, (unsigned long long)hlen, (unsigned long long)(len - 8));
  const char *js = (const char *)p + 8;
  if (mtpq__json_depth_exceeds(js, (size_t)hlen, MTPQ_ST_MAX_DEPTH))
    return mtpq_err_set(err, MTPQ_E_ST_HEADER_DEPTH, "%s: header JSON nests deeper than %d",
                        label, MTPQ_ST_MAX_DEPTH);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(js, (size_t)hlen, &end, 0);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    long off = (at && at >= js && at <= js + hlen) ? (long)(at - js) : -1;
    return mtpq_err_set(err, MTPQ_E_ST_HEADER_JSON,
                        "%s: header is not valid JSON (error near byte %ld of %llu)", label,
                        off, (unsigned long long)hlen);
  }
  for (const char *q = end; q && q < js + hlen; q++)
    if (*q != ' ' && *q != '\0' && *q != '\n' && *q != '\t' && *q != '\r') {
      cJSON_Delete(root);
      return mtpq_err_set(err, MTPQ_E_ST_HEADER_JSON,
                          "%s: unexpected byte 0x%02x after the header object at offset %ld",
                          label, (unsigned char)*q, (long)(q - js));
    }
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return mtpq_err_set(err, MTPQ_E_ST_HEADER_NOT_OBJECT, "%s: header is not a JSON object",
                        label);
  }

  enum mtpq_status st = MTPQ_OK;
  struct mtpq_st_file *f = calloc(1, sizeof *f);
  size_t nent = 0, name_bytes = 0;
  if (!f) {
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", label);
    goto out;
  }
  f->header_len = hlen;
  f->file_size = 8 + hlen + data_size;
  f->path = mtpq__strdup(label);
  for (const cJSON *c = root->child; c; c = c->next) {
    if (strcmp(c->string, "__metadata__") == 0) continue;
    if (++nent > MTPQ_ST_MAX_TENSORS) {
      st = mtpq_err_set(err, MTPQ_E_ST_TOO_MANY, "%s: more than %d tensors", label,
                        MTPQ_ST_MAX_TENSORS);
      goto out;
    }
    size_t nl = strlen(c->string);
    if (nl == 0 || nl > MTPQ_ST_MAX_NAME) {
      st = mtpq_err_set(err, MTPQ_E_ST_NAME, "%s: tensor name of %zu bytes (allowed 1..%d)",
                        label, nl, MTPQ_ST_MAX_NAME);
      goto out;
    }
    const long bad = mtpq__utf8_bad_at(c->string, nl);
    if (bad >= 0) { /* (printed as hex: the name is not text) */
      st = mtpq_err_set(err, MTPQ_E_ST_NAME, "%s: a tensor name is not valid UTF-8 (byte %ld of %zu is 0x%02x)", label,
                        bad, nl, (unsigned char)c->string[bad]);
      goto out;
    }
    name_bytes += nl + 1;
  }
  f->t = calloc(nent ? nent : 1, sizeof *f->t);
  f->names = malloc(name_bytes ? name_bytes : 1);
  if (!f->t || !f->names || !f->path) {
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", label);
    goto out;
  }
  char *np = f->names;
  for (const cJSON *c = root->child; c; c = c->next) {
    if (strcmp(c->string, "__metadata__") == 0) {
      if (f->meta) {
        st = mtpq_err_set(err, MTPQ_E_ST_DUPLICATE, "%s: __metadata__ appears twice", label);
        goto out;
      }
      st = parse_metadata(c, label, f, err);
      if (st) goto out;
      continue;
    }
    struct mtpq_tensor *t = &f->t[f->n];
    size_t nl = strlen(c->string);
    memcpy(np, c->string, nl + 1);
    t->name = np;
    np += nl + 1;
    st = parse_entry(c, label, data_size, t, err);
    if (st) goto out;
    f->n++;
  }
  qsort(f->t, f->n, sizeof *f->t, cmp_tensor_name);
  for (size_t i = 1; i < f->n; i++)
    if (strcmp(f->t[i - 1].name, f->t[i].name) == 0) {
      st = mtpq_err_set(err, MTPQ_E_ST_DUPLICATE, "%s: tensor %s is declared twice", label,
                        f->t[i].name);
      goto out;
    }
  st = check_layout(f, data_size, label, err);
  if (st) goto out;
  for (size_t i = 0; i < f->n; i++) f->t[i].offset += 8 + hlen;
out:
  cJSON_Delete(root);
  if (st) {
    mtpq_st_close(f);
    return st;
  }
  *out = f;
  return MTPQ_OK;
}

enum mtpq_status mtpq_st_open(const char *path, struct mtpq_st_file **out,
                              struct mtpq_err *err) {
  *out = NULL;
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return mtpq_err_set(err, MTPQ_E_IO_OPEN, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return mtpq_err_set(err, MTPQ_E_IO_OPEN, "%s: not a regular file", path);
  }
  uint64_t size = (uint64_t)sb.st_size;
  if (size < 8) {
    close(fd);
    return mtpq_err_set(err, MTPQ_E_ST_TOO_SMALL,
                        "%s: %llu bytes, shorter than the 8-byte header length", path,
                        (unsigned long long)size);
  }
  void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED)
    return mtpq_err_set(err, MTPQ_E_IO_READ, "%s: cannot map %llu bytes: %s", path,
                        (unsigned long long)size, strerror(errno));
  /* The header length decides where data starts; parse validates it. */
  uint64_t hlen = load_le64(map);
  uint64_t data_size = (hlen <= size - 8) ? size - 8 - hlen : 0;
  struct mtpq_st_file *f = NULL;
  enum mtpq_status st = mtpq_st_parse(map, size, data_size, path, &f, err);
  if (st) {
    munmap(map, (size_t)size);
    return st;
  }
  f->map = map;
  f->map_len = size;
  f->file_size = size;
  for (size_t i = 0; i < f->n; i++) f->t[i].data = (const unsigned char *)map + f->t[i].offset;
  *out = f;
  return MTPQ_OK;
}

void mtpq_st_close(struct mtpq_st_file *f) {
  if (!f) return;
  if (f->map) munmap(f->map, (size_t)f->map_len);
  if (f->meta) {
    for (size_t i = 0; i < 2 * f->n_meta; i++) free(f->meta[i]);
    free(f->meta);
  }
  free(f->t);
  free(f->names);
  free(f->path);
  free(f);
}

size_t mtpq_st_count(const struct mtpq_st_file *f) { return f->n; }

const struct mtpq_tensor *mtpq_st_at(const struct mtpq_st_file *f, size_t i) {
  return i < f->n ? &f->t[i] : NULL;
}

const struct mtpq_tensor *mtpq_st_find(const struct mtpq_st_file *f, const char *name) {
  size_t lo = 0, hi = f->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(f->t[mid].name, name);
    if (c == 0) return &f->t[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

size_t mtpq_st_metadata_count(const struct mtpq_st_file *f) { return f->n_meta; }
const char *mtpq_st_metadata_key(const struct mtpq_st_file *f, size_t i) {
  return i < f->n_meta ? f->meta[2 * i] : NULL;
}
const char *mtpq_st_metadata_value(const struct mtpq_st_file *f, size_t i) {
  return i < f->n_meta ? f->meta[2 * i + 1] : NULL;
}
const char *mtpq_st_metadata_get(const struct mtpq_st_file *f, const char *key) {
  for (size_t i = 0; i < f->n_meta; i++)
    if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
  return NULL;
}
const char *mtpq_st_path(const struct mtpq_st_file *f) { return f->path; }
uint64_t mtpq_st_header_len(const struct mtpq_st_file *f) { return f->header_len; }
uint64_t mtpq_st_file_size(const struct mtpq_st_file *f) { return f->file_size; }
