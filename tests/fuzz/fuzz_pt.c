/* libFuzzer: the .pt writer's round trip (io/torch_pt.c). The input's bytes
 * are int64 values; the harness writes them with mtpq_pt_write_i64 and reads
 * the archive back with its own reader, written from the zip and pickle
 * specifications rather than from the writer: the end record and central
 * directory agree with the local headers, every entry's CRC-32 (computed bit
 * by bit here) matches, archive/data/0 starts 64-aligned and holds exactly
 * the values, and the pickle walks to STOP with the ints (size, offset,
 * shape, stride) = (n, 0, n, 1). Any disagreement aborts. */
#include <string.h>

#include "fuzz_util.h"
#include "io/torch_pt.h"

#define CHECK(c)                                                                                                       \
  do {                                                                                                                 \
    if (!(c)) {                                                                                                        \
      fprintf(stderr, "fuzz_pt: check failed: %s (line %d)\n", #c, __LINE__);                                          \
      abort();                                                                                                         \
    }                                                                                                                  \
  } while (0)

static uint64_t le(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static uint32_t crc_bitwise(const unsigned char *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

/* The ints a protocol-2 pickle pushes, in order; aborts on an opcode this
 * writer must not emit or a walk that runs off the end before STOP. */
static size_t pickle_ints(const unsigned char *p, size_t n, uint64_t *out, size_t cap) {
  size_t i = 0, k = 0;
  CHECK(n >= 2 && p[0] == 0x80 && p[1] == 2);
  for (i = 2; i < n;) {
    const unsigned char op = p[i++];
    switch (op) {
    case '.': CHECK(i == n); return k; /* STOP ends the stream exactly */
    case 'c':                          /* GLOBAL: two lines */
      for (int line = 0; line < 2; line++) {
        const unsigned char *nl = memchr(p + i, '\n', n - i);
        CHECK(nl);
        i = (size_t)(nl - p) + 1;
      }
      break;
    case 'X':
      CHECK(i + 4 <= n);
      i += 4 + le(p + i, 4);
      CHECK(i <= n);
      break;
    case 'K':
      CHECK(i + 1 <= n && k < cap);
      out[k++] = p[i];
      i += 1;
      break;
    case 'J':
      CHECK(i + 4 <= n && k < cap);
      out[k++] = le(p + i, 4);
      i += 4;
      break;
    case 0x8a:
      CHECK(i + 1 <= n && p[i] == 8 && i + 9 <= n && k < cap);
      out[k++] = le(p + i + 1, 8);
      i += 9;
      break;
    case '(':
    case 't':
    case 'Q':
    case 0x85:
    case 0x89:
    case ')':
    case 'R': break;
    default: CHECK(!"unexpected pickle opcode");
    }
  }
  CHECK(!"pickle without STOP");
  return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const size_t n = size / 8;
  int64_t *v = malloc(n ? n * 8 : 1);
  if (!v) return 0;
  memcpy(v, data, n * 8); /* little-endian host: the file's bytes are the input's */
  const char *path = fuzz_file("out.pt", (const uint8_t *)"", 0);
  struct mtpq_err err = {0};
  CHECK(path && mtpq_pt_write_i64(path, v, n, &err) == MTPQ_OK);

  FILE *f = fopen(path, "rb");
  CHECK(f);
  static unsigned char z[1 << 20];
  const size_t zn = fread(z, 1, sizeof z, f);
  fclose(f);
  CHECK(zn >= 22 && zn < sizeof z);

  const unsigned char *eocd = z + zn - 22; /* no archive comment */
  CHECK(le(eocd, 4) == 0x06054b50u && le(eocd + 8, 2) == 4 && le(eocd + 10, 2) == 4);
  const size_t cd_size = le(eocd + 12, 4), cd = le(eocd + 16, 4);
  CHECK(cd + cd_size == zn - 22);
  static const char *names[4] = {"archive/data.pkl", "archive/byteorder", "archive/data/0", "archive/version"};
  const unsigned char *body[4];
  size_t len[4], at = cd;
  for (int e = 0; e < 4; e++) {
    const unsigned char *c = z + at;
    CHECK(at + 46 <= zn && le(c, 4) == 0x02014b50u && le(c + 10, 2) == 0 /* stored */);
    const size_t nl = le(c + 28, 2), xl = le(c + 30, 2), cl = le(c + 32, 2);
    CHECK(nl == strlen(names[e]) && at + 46 + nl <= zn && !memcmp(c + 46, names[e], nl));
    const uint32_t crc = (uint32_t)le(c + 16, 4);
    len[e] = le(c + 20, 4);
    CHECK(le(c + 24, 4) == len[e]);
    const size_t lo = le(c + 42, 4);
    const unsigned char *l = z + lo;
    CHECK(lo + 30 <= cd && le(l, 4) == 0x04034b50u && le(l + 14, 4) == crc);
    CHECK(le(l + 18, 4) == len[e] && le(l + 22, 4) == len[e] && le(l + 26, 2) == nl);
    CHECK(!memcmp(l + 30, names[e], nl));
    const size_t d = lo + 30 + nl + le(l + 28, 2);
    CHECK(d + len[e] <= cd);
    body[e] = z + d;
    CHECK(crc_bitwise(body[e], len[e]) == crc);
    at += 46 + nl + xl + cl;
  }
  CHECK(at == cd + cd_size);
  CHECK(len[1] == 6 && !memcmp(body[1], "little", 6));
  CHECK(len[3] == 2 && !memcmp(body[3], "3\n", 2));
  CHECK((size_t)(body[2] - z) % 64 == 0 && len[2] == n * 8 && !memcmp(body[2], data, n * 8));
  uint64_t ints[8];
  CHECK(pickle_ints(body[0], len[0], ints, 8) == 4);
  CHECK(ints[0] == n && ints[1] == 0 && ints[2] == n && ints[3] == 1);
  remove(path);
  free(v);
  return 0;
}
