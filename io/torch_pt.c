/* torch.save-compatible zip + pickle for a 1-D int64 tensor; see torch_pt.h. */
#include "io/torch_pt.h"

#include <stdlib.h>
#include <string.h>

#include "io/util.h"

/* Output is built in mtpq__buf strings (io/util.h). */
static void put_u8(struct mtpq__buf *b, unsigned v) {
  unsigned char c = (unsigned char)v;
  mtpq__buf_put(b, &c, 1);
}
static void put_le(struct mtpq__buf *b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) put_u8(b, (unsigned)(v >> (8 * i)) & 0xFF);
}
static void put_str(struct mtpq__buf *b, const char *s) { mtpq__buf_put(b, s, strlen(s)); }

static uint32_t crc32_of(const unsigned char *p, size_t n) {
  static uint32_t table[256];
  if (!table[1])
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

/* Pickle opcodes used below (protocol 2). */
static void pk_unicode(struct mtpq__buf *b, const char *s) {
  put_u8(b, 'X');
  put_le(b, strlen(s), 4);
  put_str(b, s);
}
static void pk_int(struct mtpq__buf *b, uint64_t v) {
  if (v < 256) {
    put_u8(b, 'K');
    put_u8(b, (unsigned)v);
  } else if (v < 0x80000000u) {
    put_u8(b, 'J');
    put_le(b, v, 4);
  } else { /* LONG1 */
    put_u8(b, 0x8a);
    put_u8(b, 8);
    put_le(b, v, 8);
  }
}

static void build_pickle(struct mtpq__buf *b, size_t n) {
  put_u8(b, 0x80), put_u8(b, 2);                        /* PROTO 2 */
  put_str(b, "ctorch._utils\n_rebuild_tensor_v2\n");    /* GLOBAL */
  put_u8(b, '(');                                       /* MARK: args */
  put_u8(b, '(');                                       /* MARK: persistent id */
  pk_unicode(b, "storage");
  put_str(b, "ctorch\nLongStorage\n");
  pk_unicode(b, "0");
  pk_unicode(b, "cpu");
  pk_int(b, n);
  put_u8(b, 't');                                       /* TUPLE */
  put_u8(b, 'Q');                                       /* BINPERSID */
  pk_int(b, 0);                                         /* storage offset */
  pk_int(b, n), put_u8(b, 0x85);                        /* size: TUPLE1 */
  pk_int(b, 1), put_u8(b, 0x85);                        /* stride: TUPLE1 */
  put_u8(b, 0x89);                                      /* NEWFALSE: requires_grad */
  put_str(b, "ccollections\nOrderedDict\n");
  put_u8(b, ')'), put_u8(b, 'R');                       /* OrderedDict() */
  put_u8(b, 't');                                       /* TUPLE: args */
  put_u8(b, 'R');                                       /* REDUCE */
  put_u8(b, '.');                                       /* STOP */
}

struct entry {
  const char *name;
  const unsigned char *data;
  size_t n;
  uint32_t crc;
  size_t offset;
};

/* Local header, padded with an extra field so the data starts 64-aligned
 * (what torch's own writer does, so the file can be memory-mapped). */
static void put_local(struct mtpq__buf *z, struct entry *e) {
  e->offset = z->n;
  size_t nl = strlen(e->name);
  size_t data_at = z->n + 30 + nl + 4; /* with a 4-byte extra header */
  size_t pad = (64 - data_at % 64) % 64;
  put_le(z, 0x04034b50u, 4);
  put_le(z, 20, 2), put_le(z, 0, 2), put_le(z, 0, 2); /* version, flags, stored */
  put_le(z, 0, 2), put_le(z, 0x21, 2);                 /* 1980-01-01 00:00 */
  put_le(z, e->crc, 4), put_le(z, e->n, 4), put_le(z, e->n, 4);
  put_le(z, nl, 2), put_le(z, 4 + pad, 2);
  put_str(z, e->name);
  put_le(z, 0x4246, 2), put_le(z, pad, 2); /* extra field "FB": padding */
  for (size_t i = 0; i < pad; i++) put_u8(z, 'Z');
  mtpq__buf_put(z, e->data, e->n);
}

static void put_central(struct mtpq__buf *z, const struct entry *e) {
  put_le(z, 0x02014b50u, 4);
  put_le(z, 20, 2), put_le(z, 20, 2), put_le(z, 0, 2), put_le(z, 0, 2);
  put_le(z, 0, 2), put_le(z, 0x21, 2);
  put_le(z, e->crc, 4), put_le(z, e->n, 4), put_le(z, e->n, 4);
  put_le(z, strlen(e->name), 2), put_le(z, 0, 2), put_le(z, 0, 2); /* name, extra, comment */
  put_le(z, 0, 2), put_le(z, 0, 2), put_le(z, 0, 4);               /* disk, attrs */
  put_le(z, e->offset, 4);
  put_str(z, e->name);
}

enum mtpq_status mtpq_pt_write_i64(const char *path, const int64_t *v, size_t n,
                                   struct mtpq_err *err) {
  if (n * 8 >= 0xFFFFFFFFu)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%s: %zu values need zip64, not supported", path, n);
  struct mtpq__buf pk = {0}, data = {0}, z = {0};
  build_pickle(&pk, n);
  for (size_t i = 0; i < n; i++) put_le(&data, (uint64_t)v[i], 8);
  struct entry e[4] = {
      {"archive/data.pkl", (const unsigned char *)pk.p, pk.n, 0, 0},
      {"archive/byteorder", (const unsigned char *)"little", 6, 0, 0},
      {"archive/data/0", (const unsigned char *)data.p, data.n, 0, 0},
      {"archive/version", (const unsigned char *)"3\n", 2, 0, 0},
  };
  for (int i = 0; i < 4; i++) {
    e[i].crc = crc32_of(e[i].data ? e[i].data : (const unsigned char *)"", e[i].n);
    put_local(&z, &e[i]);
  }
  size_t cd = z.n;
  for (int i = 0; i < 4; i++) put_central(&z, &e[i]);
  size_t cd_size = z.n - cd;
  put_le(&z, 0x06054b50u, 4);
  put_le(&z, 0, 2), put_le(&z, 0, 2), put_le(&z, 4, 2), put_le(&z, 4, 2);
  put_le(&z, cd_size, 4), put_le(&z, cd, 4), put_le(&z, 0, 2);
  enum mtpq_status st;
  if (pk.oom || data.oom || z.oom) st = mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", path);
  else st = mtpq__write_file_atomic(path, z.p, z.n, err);
  free(pk.p);
  free(data.p);
  free(z.p);
  return st;
}
