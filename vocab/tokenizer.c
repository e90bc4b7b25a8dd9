/* Byte-level BPE tokenizer; see vocab/tokenizer.h for what is supported. */
#include "io/json.h"
#include "vocab/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/util.h"
#include "vocab/unicode.h"

/* Qwen2/Qwen3 pre-tokenizer pattern as it appears in tokenizer.json. */
static const char QWEN_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* ---- hash map: byte string -> int32 ---------------------------------------- */

struct smap {
  size_t cap; /* power of two */
  size_t n;
  const unsigned char **key;
  size_t *klen;
  int32_t *val;
};

static uint64_t fnv(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

static int smap_init(struct smap *m, size_t want) {
  m->cap = 16;
  while (m->cap < 2 * want) m->cap *= 2;
  m->n = 0;
  m->key = calloc(m->cap, sizeof *m->key);
  m->klen = calloc(m->cap, sizeof *m->klen);
  m->val = calloc(m->cap, sizeof *m->val);
  return m->key && m->klen && m->val ? 0 : -1;
}

static void smap_free(struct smap *m) {
  free(m->key);
  free(m->klen);
  free(m->val);
}

/* Keys are borrowed (must outlive the map). Returns -1 if present. */
static int smap_put(struct smap *m, const unsigned char *k, size_t n, int32_t v) {
  size_t i = (size_t)fnv(k, n) & (m->cap - 1);
  while (m->key[i]) {
    if (m->klen[i] == n && memcmp(m->key[i], k, n) == 0) return -1;
    i = (i + 1) & (m->cap - 1);
  }
  m->key[i] = k;
  m->klen[i] = n;
  m->val[i] = v;
  m->n++;
  return 0;
}

static int32_t smap_get(const struct smap *m, const unsigned char *k, size_t n) {
  size_t i = (size_t)fnv(k, n) & (m->cap - 1);
  while (m->key[i]) {
    if (m->klen[i] == n && memcmp(m->key[i], k, n) == 0) return m->val[i];
    i = (i + 1) & (m->cap - 1);
  }
  return -1;
}

/* ---- hash map: (left id, right id) -> (rank, merged id) --------------------- */

struct pmap {
  size_t cap;
  uint64_t *key; /* left << 32 | right, +1 so 0 means empty */
  int32_t *rank, *id;
};

static size_t pmix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (size_t)k;
}

static int pmap_put(struct pmap *m, uint64_t k, int32_t rank, int32_t id) {
  size_t i = pmix(k) & (m->cap - 1);
  while (m->key[i]) {
    if (m->key[i] == k + 1) return -1;
    i = (i + 1) & (m->cap - 1);
  }
  m->key[i] = k + 1;
  m->rank[i] = rank;
  m->id[i] = id;
  return 0;
}

static int pmap_get(const struct pmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id) {
  uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
  size_t i = pmix(k - 1) & (m->cap - 1);
  while (m->key[i]) {
    if (m->key[i] == k) {
      *rank = m->rank[i];
      *id = m->id[i];
      return 1;
    }
    i = (i + 1) & (m->cap - 1);
  }
  return 0;
}

/* ---- the tokenizer ------------------------------------------------------------- */

struct added {
  unsigned char *text;
  size_t len;
  int32_t id;
};

struct cache_entry {
  unsigned char *piece;
  size_t len;
  int32_t *ids;
  size_t n;
};

#define CACHE_SLOTS 65536

struct mtpq_tokenizer {
  int32_t size;             /* max id + 1 */
  unsigned char **bytes;    /* raw bytes per id */
  size_t *blen;
  size_t *vchars;           /* characters of the vocabulary string */
  unsigned char *is_added;
  int32_t byte_id[256];     /* id of each single byte */
  struct smap vocab;        /* raw bytes -> id */
  struct pmap merges;
  struct added *added;
  size_t n_added;
  int added_first[256];     /* 1 if an added token starts with this byte */
  int nfc;
  int newline_in_added;
  struct cache_entry *cache; /* direct-mapped by hash */
  /* scratch */
  uint32_t *cp, *cp2;
  size_t cp_cap;
};

/* GPT-2 bytes_to_unicode: printable bytes map to themselves, the others to
 * 256, 257, ... in byte order. */
static void byte_alphabet(uint32_t map[256]) {
  int n = 0;
  for (int b = 0; b < 256; b++) {
    int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    map[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
  }
}

/* Byte-level string (UTF-8) -> raw bytes; -1 if a character is not in the
 * alphabet. */
static long unbyte(const char *s, const uint32_t inv[512], unsigned char *out, size_t *chars) {
  size_t n = strlen(s), k = 0, c = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    i += mtpq__utf8_decode((const unsigned char *)s + i, n - i, &cp);
    if (cp >= 512 || inv[cp] > 255) return -1;
    out[k++] = (unsigned char)inv[cp];
    c++;
  }
  *chars = c;
  return (long)k;
}

void mtpq_tokenizer_free(struct mtpq_tokenizer *t) {
  if (!t) return;
  if (t->bytes)
    for (int32_t i = 0; i < t->size; i++) free(t->bytes[i]);
  free(t->bytes);
  free(t->blen);
  free(t->vchars);
  free(t->is_added);
  smap_free(&t->vocab);
  free(t->merges.key);
  free(t->merges.rank);
  free(t->merges.id);
  for (size_t i = 0; i < t->n_added; i++) free(t->added[i].text);
  free(t->added);
  if (t->cache)
    for (size_t i = 0; i < CACHE_SLOTS; i++) {
      free(t->cache[i].piece);
      free(t->cache[i].ids);
    }
  free(t->cache);
  free(t->cp);
  free(t->cp2);
  free(t);
}

static enum mtpq_status check_supported(const cJSON *root, const char *path, struct mtpq_tokenizer *t,
                                        struct mtpq_err *err) {
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(model, "type");
  if (!cJSON_IsObject(model) || !cJSON_IsString(mt))
    return mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: no model.type", path);
  if (strcmp(mt->valuestring, "BPE") != 0)
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%s: unsupported model type %s (only BPE)", path,
                        mt->valuestring);
  static const char *off[] = {"dropout", "byte_fallback", "continuing_subword_prefix",
                              "end_of_word_suffix"};
  for (size_t i = 0; i < 4; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, off[i]);
    if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
      return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%s: unsupported model.%s", path, off[i]);
  }
  const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
  if (norm && !cJSON_IsNull(norm)) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(norm, "type");
    if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "NFC") != 0)
      return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%s: unsupported normalizer %s (only NFC)", path,
                          cJSON_IsString(ty) ? ty->valuestring : "?");
    t->nfc = 1;
  }
  const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(pre, "type");
  const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
  if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "Sequence") != 0 || cJSON_GetArraySize(seq) != 2)
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED,
                        "%s: unsupported pre_tokenizer (need Sequence[Split, ByteLevel], got %s)",
                        path, cJSON_IsString(ty) ? ty->valuestring : "none");
  const cJSON *split = seq->child, *bl = seq->child->next;
  const cJSON *pat = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(split, "pattern"), "Regex");
  const cJSON *beh = cJSON_GetObjectItemCaseSensitive(split, "behavior");
  const cJSON *inv = cJSON_GetObjectItemCaseSensitive(split, "invert");
  if (!cJSON_IsString(pat) || strcmp(pat->valuestring, QWEN_PATTERN) != 0)
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED,
                        "%s: unsupported pre_tokenizer Split pattern \"%.80s\" (only Qwen's)", path,
                        cJSON_IsString(pat) ? pat->valuestring : "?");
  if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0 || cJSON_IsTrue(inv))
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%s: unsupported Split behavior (only Isolated)", path);
  const cJSON *bty = cJSON_GetObjectItemCaseSensitive(bl, "type");
  if (!cJSON_IsString(bty) || strcmp(bty->valuestring, "ByteLevel") != 0 ||
      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(bl, "use_regex")) ||
      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(bl, "add_prefix_space")))
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED,
                        "%s: unsupported second pre_tokenizer (need ByteLevel without regex or prefix space)",
                        path);
  return MTPQ_OK;
}

enum mtpq_status mtpq_tokenizer_load(const char *path, struct mtpq_tokenizer **out,
                                     struct mtpq_err *err) {
  *out = NULL;
  char *buf = NULL;
  size_t len = 0;
  enum mtpq_status st = mtpq__read_file(path, (size_t)512 << 20, &buf, &len, err);
  if (st) return st;
  cJSON *root = mtpq__json_parse(buf, len, path, MTPQ_E_CONFIG_JSON, err);
  free(buf);
  if (!root) return MTPQ_E_CONFIG_JSON;
  struct mtpq_tokenizer *t = calloc(1, sizeof *t);
  if (!t) {
    cJSON_Delete(root);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  st = check_supported(root, path, t, err);
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  if (!st && (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)))
    st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: model.vocab or model.merges missing", path);
  /* Id space: vocab ids and added-token ids. */
  int32_t maxid = -1;
  for (const cJSON *c = st ? NULL : vocab->child; c; c = c->next) {
    if (!cJSON_IsNumber(c) || c->valuedouble < 0 || c->valuedouble > 1e8) {
      st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: vocab entry \"%.40s\" has no valid id", path,
                        c->string);
      break;
    }
    if (c->valueint > maxid) maxid = c->valueint;
  }
  for (const cJSON *a = st || !cJSON_IsArray(added) ? NULL : added->child; a; a = a->next) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
    if (cJSON_IsNumber(id) && id->valueint > maxid && id->valueint < 100000000) maxid = id->valueint;
  }
  if (!st) {
    t->size = maxid + 1;
    t->bytes = calloc((size_t)t->size, sizeof *t->bytes);
    t->blen = calloc((size_t)t->size, sizeof *t->blen);
    t->vchars = calloc((size_t)t->size, sizeof *t->vchars);
    t->is_added = calloc((size_t)t->size, 1);
    t->cache = calloc(CACHE_SLOTS, sizeof *t->cache);
    if (!t->bytes || !t->blen || !t->vchars || !t->is_added || !t->cache ||
        smap_init(&t->vocab, (size_t)cJSON_GetArraySize(vocab) + 64))
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  uint32_t fwd[256], inv[512];
  byte_alphabet(fwd);
  for (int i = 0; i < 512; i++) inv[i] = 0xFFFF;
  for (int b = 0; b < 256; b++) inv[fwd[b]] = (uint32_t)b;
  for (const cJSON *c = st ? NULL : vocab->child; c; c = c->next) {
    unsigned char tmp[4096];
    size_t chars = 0;
    if (strlen(c->string) >= sizeof tmp) {
      st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: vocab entry of %zu bytes", path, strlen(c->string));
      break;
    }
    long n = unbyte(c->string, inv, tmp, &chars);
    if (n < 0) {
      st = mtpq_err_set(err, MTPQ_E_UNSUPPORTED,
                        "%s: vocab entry \"%.40s\" (id %d) is not in the byte-level alphabet", path,
                        c->string, c->valueint);
      break;
    }
    int32_t id = c->valueint;
    if (t->bytes[id]) {
      st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: id %d appears twice in the vocab", path, id);
      break;
    }
    t->bytes[id] = malloc((size_t)n + 1);
    if (!t->bytes[id]) {
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      break;
    }
    memcpy(t->bytes[id], tmp, (size_t)n);
    t->blen[id] = (size_t)n;
    t->vchars[id] = chars;
    if (smap_put(&t->vocab, t->bytes[id], (size_t)n, id)) {
      st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: vocab string of id %d appears twice", path, id);
      break;
    }
  }
  for (int b = 0; !st && b < 256; b++) {
    unsigned char one = (unsigned char)b;
    t->byte_id[b] = smap_get(&t->vocab, &one, 1);
    if (t->byte_id[b] < 0)
      st = mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%s: byte 0x%02x has no token (no byte fallback)", path, b);
  }
  /* Merges: "a b" strings or [a, b] pairs, rank = position. */
  size_t nm = st ? 0 : (size_t)cJSON_GetArraySize(merges);
  if (!st) {
    t->merges.cap = 16;
    while (t->merges.cap < 2 * nm + 16) t->merges.cap *= 2;
    t->merges.key = calloc(t->merges.cap, sizeof *t->merges.key);
    t->merges.rank = calloc(t->merges.cap, sizeof *t->merges.rank);
    t->merges.id = calloc(t->merges.cap, sizeof *t->merges.id);
    if (!t->merges.key || !t->merges.rank || !t->merges.id)
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  int32_t rank = 0;
  for (const cJSON *m = st ? NULL : merges->child; m; m = m->next, rank++) {
    char a[2048], b[2048];
    if (cJSON_IsString(m)) {
      const char *sp = strchr(m->valuestring, ' ');
      if (!sp || (size_t)(sp - m->valuestring) >= sizeof a || strlen(sp + 1) >= sizeof b) {
        st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: merge %d \"%.40s\" is not \"a b\"", path, rank,
                          m->valuestring);
        break;
      }
      memcpy(a, m->valuestring, (size_t)(sp - m->valuestring));
      a[sp - m->valuestring] = '\0';
      strcpy(b, sp + 1);
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
               cJSON_IsString(m->child->next) && strlen(m->child->valuestring) < sizeof a &&
               strlen(m->child->next->valuestring) < sizeof b) {
      strcpy(a, m->child->valuestring);
      strcpy(b, m->child->next->valuestring);
    } else {
      st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: merge %d is malformed", path, rank);
      break;
    }
    unsigned char ba[2048], bb[4096];
    size_t ca, cb;
    long la = unbyte(a, inv, ba, &ca), lb = unbyte(b, inv, bb, &cb);
    int32_t ia = la < 0 ? -1 : smap_get(&t->vocab, ba, (size_t)la);
    int32_t ib = lb < 0 ? -1 : smap_get(&t->vocab, bb, (size_t)lb);
    if (ia < 0 || ib < 0 || la + lb > 2048) {
      st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: merge %d (\"%.30s\" \"%.30s\") names unknown tokens",
                        path, rank, a, b);
      break;
    }
    memmove(bb + la, bb, (size_t)lb);
    memcpy(bb, ba, (size_t)la);
    int32_t iab = smap_get(&t->vocab, bb, (size_t)(la + lb));
    if (iab < 0) {
      st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: merge %d result \"%.30s%.30s\" is not in the vocab",
                        path, rank, a, b);
      break;
    }
    pmap_put(&t->merges, (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib, rank, iab);
  }
  /* Added tokens. */
  size_t na = st || !cJSON_IsArray(added) ? 0 : (size_t)cJSON_GetArraySize(added);
  if (na) {
    t->added = calloc(na, sizeof *t->added);
    if (!t->added) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  for (const cJSON *a = st || !na ? NULL : added->child; a; a = a->next) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
    if (!cJSON_IsNumber(id) || id->valueint < 0 || id->valueint >= t->size || !cJSON_IsString(content) ||
        !content->valuestring[0]) {
      st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: malformed added token", path);
      break;
    }
    static const char *flags[] = {"lstrip", "rstrip", "single_word", "normalized"};
    for (size_t f = 0; f < 4 && !st; f++)
      if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, flags[f])))
        st = mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%s: added token %s (id %d) has %s set", path,
                          content->valuestring, id->valueint, flags[f]);
    if (st) break;
    struct added *x = &t->added[t->n_added++];
    x->len = strlen(content->valuestring);
    x->text = (unsigned char *)mtpq__strdup(content->valuestring);
    x->id = id->valueint;
    if (!x->text) {
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      break;
    }
    t->added_first[x->text[0]] = 1;
    t->is_added[x->id] = 1;
    if (memchr(x->text, '\n', x->len)) t->newline_in_added = 1;
    if (!t->bytes[x->id]) { /* an added id outside the vocab: its bytes are its content */
      if (!(t->bytes[x->id] = (unsigned char *)mtpq__strdup((const char *)x->text))) {
        st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
        break;
      }
      t->blen[x->id] = x->len;
      t->vchars[x->id] = 0;
      for (size_t i = 0; i < x->len;) {
        uint32_t cp;
        i += mtpq__utf8_decode(x->text + i, x->len - i, &cp);
        t->vchars[x->id]++;
      }
    }
  }
  cJSON_Delete(root);
  if (st) {
    mtpq_tokenizer_free(t);
    return st;
  }
  *out = t;
  return MTPQ_OK;
}

int32_t mtpq_tokenizer_vocab_size(const struct mtpq_tokenizer *t) { return t->size; }

void mtpq_tokenizer_fingerprint(const struct mtpq_tokenizer *t, char hex[17]) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t id = 0; id < t->size; id++) {
    const unsigned char *b = t->bytes[id];
    for (size_t i = 0; b && i < t->blen[id]; i++) h = (h ^ b[i]) * 1099511628211ULL;
    h = (h ^ 0xFFu) * 1099511628211ULL; /* the end of a token (a byte no token's length field takes) */
    h = (h ^ (uint64_t)(t->blen[id] & 0xFF)) * 1099511628211ULL;
  }
  snprintf(hex, 17, "%016llx", (unsigned long long)h);
}

const unsigned char *mtpq_tokenizer_bytes(const struct mtpq_tokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->size || !t->bytes[id]) return NULL;
  *len = t->blen[id];
  return t->bytes[id];
}

size_t mtpq_tokenizer_vocab_chars(const struct mtpq_tokenizer *t, int32_t id) {
  return id >= 0 && id < t->size ? t->vchars[id] : 0;
}

int mtpq_tokenizer_is_added(const struct mtpq_tokenizer *t, int32_t id) {
  return id >= 0 && id < t->size && t->is_added[id];
}

/* ---- BPE on one piece ----------------------------------------------------------- */

struct heap_item {
  int32_t rank;
  int32_t pos;
};

static int heap_less(struct heap_item a, struct heap_item b) {
  return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(struct heap_item *h, size_t *n, struct heap_item x) {
  size_t i = (*n)++;
  h[i] = x;
  while (i > 0 && heap_less(h[i], h[(i - 1) / 2])) {
    struct heap_item t = h[i];
    h[i] = h[(i - 1) / 2];
    h[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

static struct heap_item heap_pop(struct heap_item *h, size_t *n) {
  struct heap_item top = h[0];
  h[0] = h[--(*n)];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < *n && heap_less(h[l], h[m])) m = l;
    if (r < *n && heap_less(h[r], h[m])) m = r;
    if (m == i) break;
    struct heap_item t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
  return top;
}

/* Merge the bytes of one piece; ids written to out (capacity n). Returns
 * the count. Symbols form a linked list; a heap orders candidate merges by
 * (rank, position), and stale entries are skipped when popped. */
static size_t bpe(const struct mtpq_tokenizer *t, const unsigned char *p, size_t n, int32_t *out) {
  if (n == 1) {
    out[0] = t->byte_id[p[0]];
    return 1;
  }
  int32_t stack_id[256];
  int32_t stack_next[256], stack_prev[256];
  struct heap_item stack_heap[768]; /* pushes <= 3n: n-1 initial, 2 per merge */
  int32_t *id = n <= 256 ? stack_id : malloc(n * sizeof *id);
  int32_t *next = n <= 256 ? stack_next : malloc(n * sizeof *next);
  int32_t *prev = n <= 256 ? stack_prev : malloc(n * sizeof *prev);
  struct heap_item *h = n <= 256 ? stack_heap : malloc(3 * n * sizeof *h);
  if (!id || !next || !prev || !h) abort(); /* tiny allocation; OOM here is fatal */
  size_t hn = 0;
  for (size_t i = 0; i < n; i++) {
    id[i] = t->byte_id[p[i]];
    next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
    prev[i] = (int32_t)i - 1;
  }
  for (size_t i = 0; i + 1 < n; i++) {
    int32_t r, m;
    if (pmap_get(&t->merges, id[i], id[i + 1], &r, &m)) heap_push(h, &hn, (struct heap_item){r, (int32_t)i});
  }
  while (hn) {
    struct heap_item top = heap_pop(h, &hn);
    int32_t i = top.pos, j = next[i];
    if (id[i] < 0 || j < 0) continue;
    int32_t r, m;
    if (!pmap_get(&t->merges, id[i], id[j], &r, &m) || r != top.rank) continue;
    id[i] = m;
    id[j] = -1;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    if (prev[i] >= 0 && pmap_get(&t->merges, id[prev[i]], id[i], &r, &m))
      heap_push(h, &hn, (struct heap_item){r, prev[i]});
    if (next[i] >= 0 && pmap_get(&t->merges, id[i], id[next[i]], &r, &m))
      heap_push(h, &hn, (struct heap_item){r, i});
  }
  size_t k = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) out[k++] = id[i];
  if (n > 256) {
    free(id);
    free(next);
    free(prev);
    free(h);
  }
  return k;
}

static int bpe_cached(struct mtpq_tokenizer *t, const unsigned char *p, size_t n, mtpq_token_fn emit,
                      void *ctx) {
  struct cache_entry *e = &t->cache[fnv(p, n) & (CACHE_SLOTS - 1)];
  if (e->piece && e->len == n && memcmp(e->piece, p, n) == 0) {
    for (size_t i = 0; i < e->n; i++) emit(ctx, e->ids[i]);
    return 0;
  }
  int32_t local[256];
  int32_t *ids = n <= 256 ? local : malloc(n * sizeof *ids);
  if (!ids) return -1;
  size_t k = bpe(t, p, n, ids);
  for (size_t i = 0; i < k; i++) emit(ctx, ids[i]);
  if (n <= 64) { /* remember short pieces (the common words) */
    unsigned char *np = malloc(n ? n : 1);
    int32_t *ni = malloc(k * sizeof *ni);
    if (np && ni) {
      memcpy(np, p, n);
      memcpy(ni, ids, k * sizeof *ni);
      free(e->piece);
      free(e->ids);
      e->piece = np, e->len = n, e->ids = ni, e->n = k;
    } else { /* no room to remember it: not an error */
      free(np);
      free(ni);
    }
  }
  if (ids != local) free(ids);
  return 0;
}

/* ---- pre-tokenizer ------------------------------------------------------------------ */

static int is_nl(uint32_t c) { return c == '\r' || c == '\n'; }
static int is_other(uint32_t c) { /* [^\s\p{L}\p{N}] */
  return !mtpq__uni_is_space(c) && !mtpq__uni_is_letter(c) && !mtpq__uni_is_number(c);
}
static uint32_t fold(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c == 0x17F) return 's'; /* LATIN SMALL LETTER LONG S case-folds to s */
  return c;
}

/* End of the regex match starting at i (every position matches). */
static size_t match_at(const uint32_t *c, size_t n, size_t i) {
  /* 1. (?i:'s|'t|'re|'ve|'m|'ll|'d) */
  if (c[i] == '\'' && i + 1 < n) {
    uint32_t a = fold(c[i + 1]), b = i + 2 < n ? fold(c[i + 2]) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  /* 2. [^\r\n\p{L}\p{N}]?\p{L}+ */
  {
    size_t j = i;
    if (!is_nl(c[j]) && !mtpq__uni_is_letter(c[j]) && !mtpq__uni_is_number(c[j]) && j + 1 < n &&
        mtpq__uni_is_letter(c[j + 1]))
      j++;
    if (mtpq__uni_is_letter(c[j])) {
      while (j < n && mtpq__uni_is_letter(c[j])) j++;
      return j;
    }
  }
  /* 3. \p{N} */
  if (mtpq__uni_is_number(c[i])) return i + 1;
  /* 4.  ?[^\s\p{L}\p{N}]+[\r\n]* */
  {
    size_t j = i;
    if (c[j] == ' ' && j + 1 < n && is_other(c[j + 1])) j++;
    if (is_other(c[j])) {
      while (j < n && is_other(c[j])) j++;
      while (j < n && is_nl(c[j])) j++;
      return j;
    }
  }
  /* whitespace run [i, e) */
  size_t e = i;
  while (e < n && mtpq__uni_is_space(c[e])) e++;
  /* 5. \s*[\r\n]+ : up to the last newline of the run */
  for (size_t k = e; k > i; k--)
    if (is_nl(c[k - 1])) return k;
  /* 6. \s+(?!\S) : the run, minus its last character when a non-space follows */
  if (e == n) return e;
  if (e - i >= 2) return e - 1;
  /* 7. \s+ */
  return e;
}

/* ---- encode ---------------------------------------------------------------------------- */

static enum mtpq_status encode_plain(struct mtpq_tokenizer *t, const unsigned char *s, size_t n,
                                     mtpq_token_fn emit, void *ctx, struct mtpq_err *err) {
  if (n == 0) return MTPQ_OK;
  if (t->cp_cap < 4 * n + 4) {
    size_t cap = 4 * n + 4;
    uint32_t *a = realloc(t->cp, cap * sizeof *a), *b = a ? realloc(t->cp2, cap * sizeof *b) : NULL;
    if (a) t->cp = a;
    if (b) t->cp2 = b;
    if (!a || !b) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory for %zu bytes of text", n);
    t->cp_cap = cap;
  }
  size_t m = 0;
  int high = 0;
  for (size_t i = 0; i < n;) {
    i += mtpq__utf8_decode(s + i, n - i, &t->cp[m]);
    high |= t->cp[m] >= 0x300;
    m++;
  }
  uint32_t *c = t->cp;
  if (t->nfc && high) {
    m = mtpq__nfc(t->cp, m, t->cp2);
    c = t->cp2;
  }
  unsigned char piece[1024];
  for (size_t i = 0; i < m;) {
    size_t e = match_at(c, m, i);
    /* UTF-8 of the piece */
    size_t pl = 0;
    unsigned char *pb = piece;
    if (4 * (e - i) > sizeof piece) {
      pb = malloc(4 * (e - i));
      if (!pb) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    }
    for (size_t k = i; k < e; k++) pl += mtpq__utf8_encode(c[k], pb + pl);
    int rc = bpe_cached(t, pb, pl, emit, ctx);
    if (pb != piece) free(pb);
    if (rc) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    i = e;
  }
  return MTPQ_OK;
}

enum mtpq_status mtpq_tokenizer_encode(struct mtpq_tokenizer *t, const char *text, size_t n,
                                       mtpq_token_fn emit, void *ctx, struct mtpq_err *err) {
  const unsigned char *s = (const unsigned char *)text;
  size_t start = 0;
  for (size_t i = 0; i < n; i++) {
    if (!t->added_first[s[i]]) continue;
    const struct added *best = NULL;
    for (size_t k = 0; k < t->n_added; k++) {
      const struct added *a = &t->added[k];
      if (a->len <= n - i && memcmp(s + i, a->text, a->len) == 0 && (!best || a->len > best->len))
        best = a;
    }
    if (!best) continue;
    enum mtpq_status st = encode_plain(t, s + start, i - start, emit, ctx, err);
    if (st) return st;
    emit(ctx, best->id);
    i += best->len - 1;
    start = i + 1;
  }
  return encode_plain(t, s + start, n - start, emit, ctx, err);
}

size_t mtpq_tokenizer_safe_cut(const struct mtpq_tokenizer *t, const char *text, size_t n) {
  if (t->newline_in_added) return 0;
  for (size_t i = n; i-- > 1;) {
    unsigned char c = (unsigned char)text[i];
    if (text[i - 1] == '\n' && ((unsigned)((c | 0x20) - 'a') < 26u || (unsigned)(c - '0') < 10u)) return i;
  }
  return 0;
}
